package plans

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ferrykube/ferry/plans/rules"

	"github.com/ferrykube/ferry/internal/human"
)

// WriteSummary prints the plan for people: resource types by wave, namespaces, exclusions, data
// items, the estimate and the findings.
func (p *Plan) WriteSummary(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	src := p.Source.Context
	if src == "" {
		src = p.Source.Server
	}
	fmt.Fprintf(w, "Plan of %s (%s, Kubernetes %s)", src, p.Source.Server, p.Source.Version)
	if p.Target != nil {
		fmt.Fprintf(w, " to %s (%s, Kubernetes %s)", orDefault(p.Target.Context, p.Target.Server), p.Target.Server, p.Target.Version)
	}
	fmt.Fprintf(w, "\n\nOBJECTS BY RESTORE WAVE\nWAVE\tRESOURCE\tKIND\tOBJECTS\tSIZE\tNAMESPACES\n")
	for _, r := range p.Resources {
		fmt.Fprintf(w, "%d %s\t%s\t%s\t%d\t%s\t%d\n", r.Wave, shortWave(r.Wave), r.GroupResource(), r.Kind, r.Count, human.Bytes(r.Bytes), len(r.Namespaces))
	}

	byNS := map[string]Count{}
	for _, r := range p.Resources {
		for ns, c := range r.Namespaces {
			t := byNS[ns]
			t.Count += c.Count
			t.Bytes += c.Bytes
			byNS[ns] = t
		}
	}
	fmt.Fprintf(w, "\nOBJECTS BY NAMESPACE\nNAMESPACE\tOBJECTS\tSIZE\n")
	for _, ns := range sortedKeys(byNS) {
		fmt.Fprintf(w, "%s\t%d\t%s\n", ns, byNS[ns].Count, human.Bytes(byNS[ns].Bytes))
	}

	type excl struct{ resource, reason string }
	grouped := map[excl]int{}
	for _, e := range p.Excluded {
		grouped[excl{e.Resource, e.Reason}] += e.Count
	}
	keys := make([]excl, 0, len(grouped))
	for k := range grouped {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].resource != keys[j].resource {
			return keys[i].resource < keys[j].resource
		}
		return keys[i].reason < keys[j].reason
	})
	fmt.Fprintf(w, "\nNOT MOVED (each object is listed in the full plan)\nRESOURCE\tOBJECTS\tREASON\n")
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%d\t%s\n", k.resource, grouped[k], k.reason)
	}

	if len(p.Volumes) > 0 {
		fmt.Fprintf(w, "\nVOLUMES\tCAPACITY\tCLASS\tACCESS\tPHASE\tMOUNTED BY\n")
		for _, v := range p.Volumes {
			var pods []string
			for _, u := range v.Pods {
				pods = append(pods, u.Name+"@"+orDefault(u.Node, "unscheduled"))
			}
			name := v.Namespace + "/" + v.Name
			class := orDefault(v.StorageClass, "(default)")
			if v.NoClass {
				class = "(none)"
			}
			if v.Holds != "" {
				name += " (moves as " + v.Holds + ")"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", name, v.Capacity, class,
				strings.Join(v.AccessModes, ","), v.Phase, orDefault(strings.Join(pods, " "), "-"))
		}
	}
	if len(p.Databases)+len(p.Buckets) > 0 {
		fmt.Fprintf(w, "\nDATA\tKIND\tWHERE\tSECRET\tBOUND\tSTATUS\n")
		for _, group := range []struct {
			kind  string
			items []DataItem
		}{{"database", p.Databases}, {"bucket", p.Buckets}} {
			for _, d := range group.items {
				kind := group.kind
				if d.Engine != "" {
					kind += " (" + d.Engine + ")"
				}
				where := orDefault(d.Endpoint, d.Namespace+"/"+d.Workload)
				if t := p.Config.TargetOf(group.kind, d.Name); t != "" {
					where += " (target: " + t + ")"
				}
				status := "found"
				if d.Pod != "" {
					status += ", pod " + d.Pod
				}
				if !d.Found {
					status = "NOT FOUND: " + d.Problem
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, kind, where, orDefault(d.Secret, "-"), sizeOrDash(d.Bytes), status)
			}
		}
	}
	if len(p.Tenants) > 0 {
		fmt.Fprintf(w, "\nTENANTS (%s)\tOWNER\tNAMESPACE\n", p.Config.Tenants.Resource)
		for _, t := range p.Tenants {
			ns := t.Namespace
			if !t.NamespaceExists {
				ns += " (missing)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, t.Owner, ns)
		}
	}
	if len(p.Quiesce) > 0 {
		fmt.Fprintf(w, "\nTO QUIESCE (in order)\tACTION\tWHY\n")
		for _, q := range p.Quiesce {
			fmt.Fprintf(w, "%s %s\t%s\t%s\n", q.Resource, strings.TrimPrefix(q.Namespace+"/"+q.Name, "/"), q.Action, q.Why)
		}
	}
	if p.Upgrade != nil {
		writeUpgrade(w, p)
	}
	e := p.Estimate
	fmt.Fprintf(w, "\nESTIMATE\n%d objects (%s), volumes ≤ %s, databases ≤ %s, buckets ≤ %s: about %s\n(%s)\n",
		e.Objects, human.Bytes(e.ObjectBytes), human.Bytes(e.VolumeBytes), human.Bytes(e.DatabaseBytes), human.Bytes(e.BucketBytes), e.Duration, e.Basis)
	if len(p.Findings) > 0 {
		fmt.Fprintf(w, "\nFINDINGS\nSEVERITY\tSUBJECT\tMESSAGE\n")
		for _, f := range p.Findings {
			fmt.Fprintf(w, "%s\t%s\t%s\n", f.Severity, f.Subject, f.Message)
		}
	}
	return w.Flush()
}

func shortWave(i int) string {
	if waves := rules.Waves(); i >= 0 && i < len(waves) {
		return strings.Fields(waves[i].Name)[0]
	}
	return ""
}

func sizeOrDash(b int64) string {
	if b == 0 {
		return "-"
	}
	return human.Bytes(b)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeUpgrade prints the upgrade's sides and how green's release differs from blue's.
func writeUpgrade(w io.Writer, p *Plan) {
	blue, green := orDefault(p.Source.Context, "blue"), "green"
	if p.Target != nil {
		green = orDefault(p.Target.Context, green)
	}
	p.Upgrade.Write(w, blue, green)
}

// Write prints the upgrade's sides and how green's release differs from blue's, in tab-separated
// columns (for a tabwriter), naming the clusters blue and green.
func (u *Upgrade) Write(w io.Writer, blue, green string) {
	for _, part := range []struct {
		title string
		items []SideItem
	}{
		{fmt.Sprintf("UPGRADE: MOVES TO %s (state)", green), u.Moves},
		{fmt.Sprintf("UPGRADE: LEFT TO %s'S RELEASE (platform, not moved)", green), u.LeftToRelease},
	} {
		fmt.Fprintf(w, "\n%s\nWHAT\tOBJECTS\tWHY\n", part.title)
		for _, i := range part.items {
			fmt.Fprintf(w, "%s\t%d\t%s\n", i.Describe(), i.Objects, i.Why)
		}
		if len(part.items) == 0 {
			fmt.Fprintf(w, "(nothing)\n")
		}
	}
	d := u.Release
	fmt.Fprintf(w, "\nUPGRADE: %s'S RELEASE → %s'S\n", blue, green)
	if len(d.CRDsAdded)+len(d.CRDsRemoved)+len(d.CRDsChanged) > 0 {
		fmt.Fprintf(w, "CRD\tCHANGE\tSERVED\tSTORAGE\tNOTE\n")
		versions := func(a, b []string) string {
			return orDefault(strings.Join(a, ","), "-") + " → " + orDefault(strings.Join(b, ","), "-")
		}
		for _, group := range []struct {
			change string
			crds   []CRDChange
		}{{"removed", d.CRDsRemoved}, {"added", d.CRDsAdded}, {"versions", d.CRDsChanged}} {
			for _, c := range group.crds {
				note := c.Note
				if group.change == "removed" {
					note = fmt.Sprintf("%d %s on %s, %d of them state", c.CustomResources, c.Kind, blue, c.StateObjects)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Name, group.change, versions(c.BlueServed, c.GreenServed),
					orDefault(c.BlueStorage, "-")+" → "+orDefault(c.GreenStorage, "-"), orDefault(note, "-"))
			}
		}
	}
	if len(u.Versions) > 0 {
		fmt.Fprintf(w, "CUSTOM RESOURCES\tREAD FROM %s IN\tMOVE IN\tWHY\n", strings.ToUpper(blue))
		for _, v := range u.Versions {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.Resource, v.Blue, orDefault(v.Moved, "-"), v.Why)
		}
	}
	if len(d.NamespacesAdded)+len(d.NamespacesRemoved)+len(d.ComponentsAdded)+len(d.ComponentsRemoved) > 0 {
		fmt.Fprintf(w, "COMPONENT\tCHANGE\n")
		for _, ns := range d.NamespacesRemoved {
			fmt.Fprintf(w, "namespace %s\tonly on %s\n", ns, blue)
		}
		for _, ns := range d.NamespacesAdded {
			fmt.Fprintf(w, "namespace %s\tonly on %s\n", ns, green)
		}
		for _, c := range d.ComponentsRemoved {
			fmt.Fprintf(w, "%s\tonly on %s\n", c, blue)
		}
		for _, c := range d.ComponentsAdded {
			fmt.Fprintf(w, "%s\tonly on %s\n", c, green)
		}
	}
	if len(d.ImagesChanged) > 0 {
		fmt.Fprintf(w, "IMAGE OF\tCONTAINER\t%s\t%s\n", strings.ToUpper(blue), strings.ToUpper(green))
		for _, c := range d.ImagesChanged {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.ComponentRef, c.Container, orDefault(c.Blue, "-"), orDefault(c.Green, "-"))
		}
	}
	if len(u.LeaveBehind) > 0 {
		fmt.Fprintf(w, "LEFT BEHIND ON %s (--leave-behind)\t%s\n", strings.ToUpper(blue), strings.Join(u.LeaveBehind, ", "))
	}
}
