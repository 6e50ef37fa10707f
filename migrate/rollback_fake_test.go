package migrate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

// shifted is a run driven to shifted, its lease given up: the state ferry rollback finds.
func shifted(t *testing.T) (Options, fakeCluster, fakeCluster, *fakeSwitcher, string) {
	t.Helper()
	store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
	o := runOn(t, store, blue, green, sw)
	r, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if err := r.Drive(context.Background()); err != nil {
		t.Fatal(err)
	}
	return o, blue, green, sw, r.Journal.Run.ID
}

// greenWrites changes a ConfigMap green got from blue and creates one, as green's users would.
func greenWrites(t *testing.T, green fakeCluster) {
	t.Helper()
	ctx := context.Background()
	setColor(t, green, "green")
	orders := configMap("shop", "orders", map[string]any{"n": "1"})
	orders.SetCreationTimestamp(metav1.NewTime(time.Now().Add(time.Second)))
	if _, err := green.dyn.Resource(configMapsGVR).Namespace("shop").Create(ctx, orders, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func resume(t *testing.T, o Options, id string) *Runner {
	t.Helper()
	r, err := Resume(context.Background(), o, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func color(t *testing.T, c fakeCluster, name string) string {
	t.Helper()
	cm := c.get(t, configMapsGVR, "shop", name)
	if cm == nil {
		return "(none)"
	}
	s, _, _ := unstructured.NestedString(cm.Object, "data", "color")
	return s
}

// TestRollbackRefusesToLoseGreensWrites: once green may have taken writes, a plain rollback is
// refused and names what would be lost (the objects created and changed on green); both choices
// at once are bad input; discarding them is journaled with who chose, and goes back to blue as
// blue was.
func TestRollbackRefusesToLoseGreensWrites(t *testing.T) {
	ctx := context.Background()
	o, blue, green, sw, id := shifted(t)
	greenWrites(t, green)
	r := resume(t, o, id)
	err := r.Rollback(ctx, RollbackOptions{By: "ops"})
	if !errors.Is(err, ErrGreenWrites) {
		t.Fatalf("rollback: %v, want ErrGreenWrites", err)
	}
	for _, want := range []string{"objects created on green since the restore: v1 ConfigMap shop/orders", "objects changed on green since the restore: v1 ConfigMap shop/settings"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "writes to ;") {
		t.Errorf("refusal %q names an empty list of data", err)
	}
	if r.Journal.IsDone(RolledBack, 0) || len(sw.restored) != 0 {
		t.Fatal("a refused rollback went back")
	}
	if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, DiscardGreenWrites: true}); !badinput.Is(err) {
		t.Errorf("carry back and discard at once: %v, want bad input", err)
	}
	if err := r.Rollback(ctx, RollbackOptions{DiscardGreenWrites: true, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.lastNote(NoteWritesDiscarded + " by ops"); !ok {
		t.Errorf("journal %q lacks who discarded green's writes", states(r.Journal))
	}
	if r.Journal.Current() != RolledBack || len(sw.restored) != 1 {
		t.Errorf("state %q, traffic restored %d times; want rolled back once", r.Journal.Current(), len(sw.restored))
	}
	if suspend, marked := blue.suspended(t, "shop", "report"); suspend || marked {
		t.Error("blue's writer did not start again")
	}
	if suspend, _ := green.suspended(t, "shop", "report"); !suspend {
		t.Error("green's writer still runs")
	}
	if c := color(t, blue, "settings"); c != "blue" {
		t.Errorf("blue's ConfigMap: %q, want blue's own (green's writes discarded)", c)
	}
}

// TestRollbackBeforeGreenWrites: a run stopped after its verify (green never took writes) rolls
// back without asking: blue's writer starts, green's restored one stays stopped (it came
// quiesced), and traffic, never moved, is not touched.
func TestRollbackBeforeGreenWrites(t *testing.T) {
	ctx := context.Background()
	store, blue, green, sw := fileStore(t), shopBlue(t), newFakeCluster(t, "green"), &fakeSwitcher{}
	o := runOn(t, store, blue, green, sw)
	o.Crash = func(e Event) {
		if e.State == Verified && e.Phase == Done {
			panic(errCrash{e})
		}
	}
	id := func() (id string) {
		r := start(t, o)
		defer func() { recover(); id = r.Journal.Run.ID; r.Close(ctx) }()
		r.Drive(ctx)
		return
	}()
	o.Crash = nil
	r := resume(t, o, id)
	if err := r.Rollback(ctx, RollbackOptions{}); err != nil {
		t.Fatal(err)
	}
	e, _ := r.Journal.Last(RolledBack, Done, 0)
	if !strings.Contains(e.Detail, "by hand; traffic on blue, 1 writers started on blue, 0 stopped on green") {
		t.Errorf("rolled back: %q", e.Detail)
	}
	if len(sw.restored) != 0 {
		t.Errorf("traffic restored %v, though it never moved", sw.restored)
	}
	if suspend, _ := blue.suspended(t, "shop", "report"); suspend {
		t.Error("blue's writer did not start again")
	}
	if suspend, _ := green.suspended(t, "shop", "report"); !suspend {
		t.Error("green's writer runs")
	}
}

// TestCarryBack: a carry-back stops green's writers, backs green up, makes blue hold what green
// holds (the changed object changed, the created one created), verifies blue against it, and
// only then sends traffic back; the report says who asked, what moved and how long it took.
func TestCarryBack(t *testing.T) {
	ctx := context.Background()
	o, blue, green, sw, id := shifted(t)
	greenWrites(t, green)
	r := resume(t, o, id)
	if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"}); err != nil {
		t.Fatalf("carry-back: %v\njournal %q", err, states(r.Journal))
	}
	var order []State
	for _, e := range r.Journal.Events() {
		if e.Phase == Done && e.State != Shifted && e.State != Shifting && e.Seq > 22 {
			order = append(order, e.State)
		}
	}
	want := append(append([]State(nil), CarryBackStates...), RolledBack)
	if len(order) != len(want) {
		t.Fatalf("steps done %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("steps done %v, want %v", order, want)
		}
	}
	if c := color(t, blue, "settings"); c != "green" {
		t.Errorf("blue's settings: %q, want green's write carried back", c)
	}
	if blue.get(t, configMapsGVR, "shop", "orders") == nil {
		t.Error("blue lacks the ConfigMap created on green")
	}
	if suspend, marked := blue.suspended(t, "shop", "report"); suspend || marked {
		t.Error("blue's writer did not start again")
	}
	if suspend, _ := green.suspended(t, "shop", "report"); !suspend {
		t.Error("green's writer runs")
	}
	if len(sw.restored) != 1 {
		t.Errorf("traffic restored %d times, want once", len(sw.restored))
	}
	if r.CarryingBack() {
		t.Error("still carrying back after the rollback")
	}
	rep := BuildReport(r.Journal)
	cb := rep.CarryBack
	if cb == nil || cb.By != "ops" || cb.Backup != CarryBackName(id) || cb.Objects == nil || cb.Verification == nil || cb.ToBlueSeconds <= 0 || cb.Seconds <= 0 {
		t.Fatalf("report's carry-back %+v", cb)
	}
	if strings.Join(cb.Objects.Created, ",") != "v1 ConfigMap shop/orders" || strings.Join(cb.Objects.Changed, ",") != "v1 ConfigMap shop/settings" {
		t.Errorf("carried objects %+v", cb.Objects)
	}
	if rep.Rollback == nil || !strings.Contains(rep.Rollback.Why, "green's writes carried back") {
		t.Errorf("report's rollback %+v", rep.Rollback)
	}
}

// TestCarryBackResumesAfterEachEvent: a carry-back killed right after any of its events goes on
// from its journal with a plain rollback (the request is journaled), each step finished once;
// while it is unfinished the forward run refuses to go on; discarding green's writes instead
// ends it without carrying them, unless it had begun writing into blue: that is refused unless
// told to leave blue so.
func TestCarryBackResumesAfterEachEvent(t *testing.T) {
	const events = 12 // the request, four steps and the rollback, each begun and done, and the note that blue is written
	for n := 1; n <= events; n++ {
		for _, discard := range []bool{false, true} {
			name := itoa(n)
			if discard {
				name += "-discard"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				o, blue, green, _, id := shifted(t)
				greenWrites(t, green)
				seen := 0
				var killedAt Event
				o.Crash = func(e Event) {
					if seen++; seen == n {
						killedAt = e
						panic(errCrash{e})
					}
				}
				func() {
					r := resume(t, o, id)
					defer func() {
						if p := recover(); p != nil {
							if _, ok := p.(errCrash); !ok {
								panic(p)
							}
						}
						r.Close(ctx)
					}()
					if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"}); err != nil {
						t.Fatal(err)
					}
					t.Fatalf("the carry-back was not killed after event %d", n)
				}()
				o.Crash = nil
				r := resume(t, o, id)
				if !r.Journal.IsDone(RolledBack, 0) {
					if !r.CarryingBack() {
						t.Fatal("CarryingBack is false after the request was journaled")
					}
					if err := r.Drive(ctx); !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "only the carry-back goes on with it") {
						t.Errorf("drive during a carry-back: %v, want it refused", err)
					}
				}
				partly := killedAt.State == CarriedBack && killedAt.Phase == Note
				err := r.Rollback(ctx, RollbackOptions{DiscardGreenWrites: discard, By: "ops2"})
				if discard && partly {
					if !errors.Is(err, ErrPartlyCarried) {
						t.Fatalf("killed while writing into blue: discarding green's writes: %v, want it refused", err)
					}
					err = r.Rollback(ctx, RollbackOptions{DiscardGreenWrites: true, DespitePartialCarryBack: true, By: "ops2"})
				}
				if err != nil {
					t.Fatalf("killed after %s %s: rollback: %v", killedAt.State, killedAt.Phase, err)
				}
				begins, dones := map[State]int{}, map[State]int{}
				for _, e := range r.Journal.Events() {
					switch e.Phase {
					case Begin:
						begins[e.State]++
					case Done:
						dones[e.State]++
					case Failed, Paused:
						t.Errorf("event %d: %s %s: %s", e.Seq, e.State, e.Phase, e.Detail)
					}
				}
				if dones[RolledBack] != 1 {
					t.Fatalf("killed after %s %s: rolled back %d times", killedAt.State, killedAt.Phase, dones[RolledBack])
				}
				carried := dones[BlueVerified] == 1
				for _, s := range append(append([]State(nil), CarryBackStates...), RolledBack) {
					want := 1
					if s == killedAt.State && (killedAt.Phase == Begin || killedAt.Phase == Note && (s == CarriedBack || s == RolledBack)) {
						want = 2
					}
					if dones[s] > 1 || (dones[s] == 1 && begins[s] != want) {
						t.Errorf("killed after %s %s: %s begun %d times, done %d", killedAt.State, killedAt.Phase, s, begins[s], dones[s])
					}
				}
				// Discarding green's writes ends a carry-back that had not verified blue yet.
				if wantCarried := !discard || killedAt.State == BlueVerified && killedAt.Phase == Done || killedAt.State == RolledBack; carried != wantCarried {
					t.Errorf("killed after %s %s, discard %v: carried back %v, want %v", killedAt.State, killedAt.Phase, discard, carried, wantCarried)
				}
				if carried && color(t, blue, "settings") != "green" {
					t.Error("blue lacks green's write after the carry-back")
				}
				if suspend, marked := blue.suspended(t, "shop", "report"); suspend || marked {
					t.Error("blue's writer did not start again")
				}
			})
		}
	}
}

// TestRollbackBeforeTheRestore: a run stopped before its restore (blue quiesced, green not yet
// given blue's data) goes back by starting blue's writers; for an upgrade, green's release's own
// writers, which the run stopped before loading blue's data, start again too; otherwise green's
// are left as they are.
func TestRollbackBeforeTheRestore(t *testing.T) {
	for _, upgrade := range []bool{false, true} {
		t.Run(map[bool]string{false: "migration", true: "upgrade"}[upgrade], func(t *testing.T) {
			ctx := context.Background()
			blue, green := shopBlue(t), newFakeCluster(t, "green", obj("v1", "Namespace", "", "shop"), cronJob("shop", "report"))
			o := Options{Blue: blue.Cluster, Green: green.Cluster, Config: shopConfig()}
			if upgrade {
				o.Upgrade = &plans.UpgradeOptions{}
			}
			r := testRunner(t, o, doneUpTo(BackedUp)...)
			for _, c := range []fakeCluster{blue, green} {
				if _, err := r.quiescer(c.Cluster, false).Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Rollback(ctx, RollbackOptions{}); err != nil {
				t.Fatal(err)
			}
			if suspend, marked := blue.suspended(t, "shop", "report"); suspend || marked {
				t.Error("blue's writer did not start again")
			}
			suspend, _ := green.suspended(t, "shop", "report")
			e, _ := r.Journal.Last(RolledBack, Done, 0)
			if started := strings.Contains(e.Detail, "1 of green's release started again"); suspend == upgrade || started != upgrade {
				t.Errorf("green's writer suspended %v, rolled back %q; want it started again only for an upgrade", suspend, e.Detail)
			}
		})
	}
}

// TestResumeRefusesADamagedPlan: a journal whose plan cannot be read is refused by name, and the
// lease taken to read it is given back.
func TestResumeRefusesADamagedPlan(t *testing.T) {
	ctx := context.Background()
	store := fileStore(t)
	r := testRunner(t, Options{Store: store}, Event{State: Planned, Phase: Begin}, Event{State: Planned, Phase: Done, Data: []byte(`{"resources": 7}`)})
	if _, err := Resume(ctx, Options{Store: store}, r.Journal.Run.ID); err == nil || !strings.Contains(err.Error(), "the journal's plan") {
		t.Fatalf("resume: %v, want the journal's plan named", err)
	}
	// The lease was given back: another run on the same clusters may start.
	l, err := AcquireLease(ctx, store, r.Journal.Run, time.Minute, discard)
	if err != nil {
		t.Fatalf("the lease after a refused resume: %v", err)
	}
	l.Release(ctx)
}

// TestCarryBackLeavesOutWhatTheRunSkipped: a claim that had no volume on blue, and has none on
// green either, is left out of the backup of green, and named: there is nothing of it to carry
// back; the carry-back goes on.
func TestCarryBackLeavesOutWhatTheRunSkipped(t *testing.T) {
	ctx := context.Background()
	claim, class := scratchClaim("Pending", ""), obj("storage.k8s.io/v1", "StorageClass", "", "standard")
	store, blue, green, sw := fileStore(t), shopBlue(t, claim, class), newFakeCluster(t, "green", class.DeepCopy()), &fakeSwitcher{}
	// Green's copy of the claim is listed pending, as blue's was.
	claims := schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	green.dyn.PrependReactor("list", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		got, err := green.dyn.Tracker().List(claims, schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := got.(*unstructured.UnstructuredList).DeepCopy()
		for i := range list.Items {
			unstructured.SetNestedField(list.Items[i].Object, "Pending", "status", "phase")
		}
		return true, list, nil
	})
	r := start(t, runOn(t, store, blue, green, sw))
	if err := r.Drive(ctx); err != nil {
		t.Fatalf("drive: %v\njournal %q", err, states(r.Journal))
	}
	if err := r.Rollback(ctx, RollbackOptions{CarryBack: true, By: "ops"}); err != nil {
		t.Fatalf("carry-back: %v", err)
	}
	e, _ := r.Journal.Last(GreenBackedUp, Done, 0)
	if !strings.Contains(e.Detail, "left out, as blue had nothing of them for the run's backup: volume shop/scratch") {
		t.Errorf("green-backed-up %q, want the skipped claim named as left out", e.Detail)
	}
	if r.Journal.Current() != RolledBack {
		t.Errorf("state %q", r.Journal.Current())
	}
}

// TestLeaveOutSkipped: what the run's backup skipped on blue, or found without data there, is left
// out of green's plan and named; but a claim that had no volume on blue and has one on green
// (bound by its class, or by a pod of green's) stays in: green may have written to it.
func TestLeaveOutSkipped(t *testing.T) {
	original := &snapshot.Manifest{
		NoData:  []snapshot.Skipped{{Kind: "volume", Name: "alice/never-used"}, {Kind: "volume", Name: "alice/first-used-on-green"}},
		Skipped: []snapshot.Skipped{{Kind: "volume", Name: "alice/lost"}, {Kind: "database", Name: "katib-mysql"}},
	}
	plan := &plans.Plan{
		Volumes: []plans.Volume{{Namespace: "alice-green", Name: "never-used", Phase: "Pending"}, {Namespace: "alice-green", Name: "first-used-on-green", Phase: "Bound", VolumeName: "pv-1"},
			{Namespace: "alice-green", Name: "lost", Phase: "Bound", VolumeName: "pv-2"}, {Namespace: "alice-green", Name: "notes", Phase: "Bound", VolumeName: "pv-3"}},
		Databases: []plans.DataItem{{Name: "katib-mysql"}, {Name: "kfp-mysql"}},
	}
	r := &Runner{plan: &plans.Plan{}, o: Options{Mapping: snapshot.Mapping{Namespaces: map[string]string{"alice": "alice-green"}}}}
	left := r.leaveOutSkipped(plan, original)
	if want := []string{"volume alice-green/never-used", "volume alice-green/lost", "database katib-mysql"}; !slices.Equal(left, want) {
		t.Errorf("left out %q, want %q", left, want)
	}
	var kept []string
	for _, v := range plan.Volumes {
		kept = append(kept, v.Name)
	}
	if !slices.Equal(kept, []string{"first-used-on-green", "notes"}) || len(plan.Databases) != 1 {
		t.Errorf("green's plan keeps volumes %q and databases %+v, want first-used-on-green, notes and kfp-mysql", kept, plan.Databases)
	}
}

// TestWithoutUnwritten: of the claims that had no volume on blue, green's copies that hold
// nothing (no entry but lost+found) are left out of the carry-back and named in blue's names;
// one that holds a file, or a file the backup of green skipped as it changed, is carried back.
func TestWithoutUnwritten(t *testing.T) {
	ctx := context.Background()
	store := fileStore(t)
	w, err := snapshot.Create(ctx, store, "green", plans.Cluster{}, &plans.Plan{}, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for claim, files := range map[string][]snapshot.File{
		"empty":         nil,
		"formatted":     {{Path: "lost+found/", Type: "dir", Mode: "0700", ModTime: at}},
		"written":       {{Path: "analysis.ipynb", Type: "file", Mode: "0644", Size: 2, ModTime: at, SHA256: strings.Repeat("a", 64)}},
		"changing":      nil, // its one file changed while read: skipped
		"bound-on-blue": nil, // had a volume on blue: carried back as ever
	} {
		l, err := w.NewFileList(ctx, "alice-green", claim)
		if err != nil {
			t.Fatal(err)
		}
		var bytes int64
		for _, f := range files {
			bytes += f.Size
			if err := l.Add(f); err != nil {
				t.Fatal(err)
			}
		}
		list, err := l.Close()
		if err != nil {
			t.Fatal(err)
		}
		key, err := w.Put(ctx, "volumes/alice-green/"+claim+".tar.zst", strings.NewReader("tar"))
		if err != nil {
			t.Fatal(err)
		}
		w.AddVolume(snapshot.Volume{Namespace: "alice-green", Name: claim, Key: key, Bytes: bytes, List: &list})
	}
	w.Skip("file", "alice-green/changing:notes.txt", "it changed while read, twice")
	if _, err := w.Commit(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	carried, err := snapshot.Open(ctx, store, "green", nil)
	if err != nil {
		t.Fatal(err)
	}
	var noData []snapshot.Skipped
	for _, claim := range []string{"empty", "formatted", "written", "changing"} {
		noData = append(noData, snapshot.Skipped{Kind: "volume", Name: "alice/" + claim})
	}
	r := &Runner{plan: &plans.Plan{}, o: Options{Mapping: snapshot.Mapping{Namespaces: map[string]string{"alice": "alice-green"}}}}
	out, left, err := r.withoutUnwritten(ctx, &snapshot.Manifest{NoData: noData}, carried)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	if want := []string{"alice/empty", "alice/formatted"}; !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	var kept []string
	for _, v := range out.Manifest.Volumes {
		kept = append(kept, v.Name)
	}
	slices.Sort(kept)
	if want := []string{"bound-on-blue", "changing", "written"}; !slices.Equal(kept, want) {
		t.Errorf("the carry-back restores volumes %q, want %q", kept, want)
	}
	for _, s := range out.Manifest.Streams {
		if strings.Contains(s.Key, "/empty") || strings.Contains(s.Key, "/formatted") {
			t.Errorf("the carry-back still reads stream %s of a volume it leaves out", s.Key)
		}
	}
}
