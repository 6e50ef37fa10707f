package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"
	ferryconfig "github.com/ferrykube/ferry/plans/config"
)

// route53Switcher keeps two weighted record sets of one name and type, blue's and green's, and
// changes both in one change batch, which Route 53 applies atomically. A simple record found there
// is taken to be blue's and is converted on the first change (deleted and replaced by the two
// weighted ones, in the same batch); Restore brings it back.
type route53Switcher struct {
	cfg    ferryconfig.Route53Traffic
	opts   Options
	client *route53.Client
	// lastChange is the ID of this switcher's last change batch, which WaitSettled waits for.
	lastChange string
	lastTTL    int64
}

func newRoute53(ctx context.Context, cfg ferryconfig.Route53Traffic, opts Options) (*route53Switcher, error) {
	var awsCfg aws.Config
	if opts.AWSConfig != nil {
		awsCfg = opts.AWSConfig.Copy()
	} else {
		var lo []func(*config.LoadOptions) error
		if cfg.Region != "" {
			lo = append(lo, config.WithRegion(cfg.Region))
		}
		if cfg.Profile != "" {
			lo = append(lo, config.WithSharedConfigProfile(cfg.Profile))
		}
		var err error
		if awsCfg, err = config.LoadDefaultConfig(ctx, lo...); err != nil {
			return nil, fmt.Errorf("route53: load AWS configuration: %w", err)
		}
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1" // Route 53 is global; the SDK still wants a region to sign for
	}
	client := route53.NewFromConfig(awsCfg, func(o *route53.Options) {
		// Route 53 allows five change requests a second per account and answers Throttling or
		// PriorRequestNotComplete beyond; the standard retryer backs off on both.
		o.RetryMaxAttempts = 10
	})
	return &route53Switcher{cfg: cfg, opts: opts, client: client}, nil
}

func (r *route53Switcher) Name() string {
	return fmt.Sprintf("route53 %s %s in zone %s (%s/%s)", r.cfg.RecordName, r.cfg.RecordType, r.cfg.HostedZoneID, r.cfg.Blue.SetIdentifier, r.cfg.Green.SetIdentifier)
}

// canonical is how Route 53 writes names: lower case, ending with a dot.
func canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

// recordSets are the record sets at the name and type that ferry manages.
type recordSets struct {
	Simple *types.ResourceRecordSet `json:"simple,omitempty"`
	Blue   *types.ResourceRecordSet `json:"blue,omitempty"`
	Green  *types.ResourceRecordSet `json:"green,omitempty"`
	// Others use another routing policy or set identifier: traffic ferry does not control.
	Others []string `json:"-"`
}

func (rs recordSets) list() []types.ResourceRecordSet {
	var out []types.ResourceRecordSet
	for _, r := range []*types.ResourceRecordSet{rs.Simple, rs.Blue, rs.Green} {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

func (r *route53Switcher) records(ctx context.Context) (recordSets, error) {
	var rs recordSets
	name, typ := canonical(r.cfg.RecordName), types.RRType(strings.ToUpper(r.cfg.RecordType))
	in := &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(r.cfg.HostedZoneID),
		StartRecordName: aws.String(name), StartRecordType: typ, MaxItems: aws.Int32(100)}
	for {
		out, err := r.client.ListResourceRecordSets(ctx, in)
		if err != nil {
			return rs, fmt.Errorf("route53 zone %s: list %s %s: %w", r.cfg.HostedZoneID, name, typ, err)
		}
		for _, rec := range out.ResourceRecordSets {
			if canonical(aws.ToString(rec.Name)) != name || rec.Type != typ {
				return rs, nil // listed in order: past the name and type
			}
			switch id := aws.ToString(rec.SetIdentifier); {
			case id == "" && rec.Weight == nil:
				rs.Simple = &rec
			case id == r.cfg.Blue.SetIdentifier && rec.Weight != nil:
				rs.Blue = &rec
			case id == r.cfg.Green.SetIdentifier && rec.Weight != nil:
				rs.Green = &rec
			default:
				rs.Others = append(rs.Others, id)
			}
		}
		if !out.IsTruncated {
			return rs, nil
		}
		in.StartRecordName, in.StartRecordType, in.StartRecordIdentifier = out.NextRecordName, out.NextRecordType, out.NextRecordIdentifier
	}
}

func (r *route53Switcher) Preflight(ctx context.Context) error {
	if _, err := r.client.GetHostedZone(ctx, &route53.GetHostedZoneInput{Id: aws.String(r.cfg.HostedZoneID)}); err != nil {
		return fmt.Errorf("route53 hosted zone %s: %w", r.cfg.HostedZoneID, err)
	}
	rs, err := r.records(ctx)
	if err != nil {
		return err
	}
	switch {
	case len(rs.Others) > 0:
		return fmt.Errorf("route53 %s %s: record sets %q use other set identifiers or routing policies; ferry would not control all of the traffic",
			r.cfg.RecordName, r.cfg.RecordType, rs.Others)
	case rs.Simple != nil && (rs.Blue != nil || rs.Green != nil):
		return fmt.Errorf("route53 %s %s: holds a simple record beside weighted ones", r.cfg.RecordName, r.cfg.RecordType)
	case rs.Simple == nil && rs.Blue == nil && rs.Green == nil:
		return fmt.Errorf("route53 %s %s: no record in zone %s (want a simple record for blue, or weighted records %s and %s)",
			r.cfg.RecordName, r.cfg.RecordType, r.cfg.HostedZoneID, r.cfg.Blue.SetIdentifier, r.cfg.Green.SetIdentifier)
	case rs.Simple != nil:
		// The conversion replaces the simple record by blue's: it must answer the same, or the
		// first step would move blue's traffic too.
		if got, want := answer(*rs.Simple), answer(r.weighted(r.cfg.Blue, 0, 0)); got != want {
			return fmt.Errorf("route53 %s %s: the simple record answers %s but traffic.route53.blue says %s",
				r.cfg.RecordName, r.cfg.RecordType, got, want)
		}
	}
	return nil
}

// answer is what a record answers with: its sorted values or its alias target.
func answer(rec types.ResourceRecordSet) string {
	if rec.AliasTarget != nil {
		return "alias " + canonical(aws.ToString(rec.AliasTarget.DNSName)) + " in zone " + aws.ToString(rec.AliasTarget.HostedZoneId)
	}
	var values []string
	for _, v := range rec.ResourceRecords {
		values = append(values, aws.ToString(v.Value))
	}
	slices.Sort(values)
	return "[" + strings.Join(values, " ") + "]"
}

func (r *route53Switcher) Current(ctx context.Context) (Split, error) {
	rs, err := r.records(ctx)
	if err != nil {
		return Split{}, err
	}
	return r.splitOf(rs)
}

func (r *route53Switcher) splitOf(rs recordSets) (Split, error) {
	if rs.Simple != nil {
		return Green(0), nil
	}
	if rs.Blue == nil && rs.Green == nil {
		return Split{}, fmt.Errorf("route53 %s %s: no record in zone %s", r.cfg.RecordName, r.cfg.RecordType, r.cfg.HostedZoneID)
	}
	w := func(rec *types.ResourceRecordSet) int {
		if rec == nil {
			return 0
		}
		return int(aws.ToInt64(rec.Weight))
	}
	s, ok := splitOf(w(rs.Blue), w(rs.Green))
	if !ok {
		return Green(50), nil // Route 53 answers evenly when every weight is 0
	}
	return s, nil
}

func (r *route53Switcher) Save(ctx context.Context) (State, error) {
	rs, err := r.records(ctx)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(rs)
	return State(data), err
}

func (r *route53Switcher) weighted(t ferryconfig.Route53Target, weight int, ttl int64) types.ResourceRecordSet {
	rec := types.ResourceRecordSet{Name: aws.String(canonical(r.cfg.RecordName)), Type: types.RRType(strings.ToUpper(r.cfg.RecordType)),
		SetIdentifier: aws.String(t.SetIdentifier), Weight: aws.Int64(int64(weight))}
	if t.AliasTarget != nil {
		rec.AliasTarget = &types.AliasTarget{HostedZoneId: aws.String(t.AliasTarget.HostedZoneID), DNSName: aws.String(t.AliasTarget.DNSName),
			EvaluateTargetHealth: t.AliasTarget.EvaluateTargetHealth}
		return rec
	}
	rec.TTL = aws.Int64(ttl)
	for _, v := range t.Values {
		rec.ResourceRecords = append(rec.ResourceRecords, types.ResourceRecord{Value: aws.String(v)})
	}
	return rec
}

// ttl is the weighted records' TTL: the configured one, else the record's in place, else 60 s.
func (r *route53Switcher) ttl(rs recordSets) int64 {
	if r.cfg.TTL > 0 {
		return r.cfg.TTL
	}
	for _, rec := range []*types.ResourceRecordSet{rs.Simple, rs.Blue, rs.Green} {
		if rec != nil && rec.TTL != nil {
			return *rec.TTL
		}
	}
	return 60
}

func (r *route53Switcher) Apply(ctx context.Context, s Split) error {
	if err := s.Valid(); err != nil {
		return err
	}
	rs, err := r.records(ctx)
	if err != nil {
		return err
	}
	ttl := r.ttl(rs)
	blue, green := r.weighted(r.cfg.Blue, s.Blue, ttl), r.weighted(r.cfg.Green, s.Green, ttl)
	var changes []types.Change
	if rs.Simple != nil {
		r.opts.Logger.Info("route53: converting the simple record to weighted records", "record", r.cfg.RecordName, "type", r.cfg.RecordType)
		changes = []types.Change{{Action: types.ChangeActionDelete, ResourceRecordSet: rs.Simple},
			{Action: types.ChangeActionCreate, ResourceRecordSet: &blue}, {Action: types.ChangeActionCreate, ResourceRecordSet: &green}}
	} else {
		changes = []types.Change{{Action: types.ChangeActionUpsert, ResourceRecordSet: &blue}, {Action: types.ChangeActionUpsert, ResourceRecordSet: &green}}
	}
	r.opts.Logger.Info("route53: setting weights", "record", r.cfg.RecordName, "split", s.String())
	return r.change(ctx, changes, "ferry: "+s.String(), ttl)
}

func (r *route53Switcher) change(ctx context.Context, changes []types.Change, comment string, ttl int64) error {
	out, err := r.client.ChangeResourceRecordSets(ctx, &route53.ChangeResourceRecordSetsInput{HostedZoneId: aws.String(r.cfg.HostedZoneID),
		ChangeBatch: &types.ChangeBatch{Changes: changes, Comment: aws.String(comment)}})
	if err != nil {
		return fmt.Errorf("route53 zone %s: change %s %s: %w", r.cfg.HostedZoneID, r.cfg.RecordName, r.cfg.RecordType, err)
	}
	r.lastChange, r.lastTTL = aws.ToString(out.ChangeInfo.Id), ttl
	return nil
}

func (r *route53Switcher) WaitSettled(ctx context.Context, s Split) error {
	if err := r.waitChange(ctx); err != nil {
		return err
	}
	rs, err := r.records(ctx)
	if err != nil {
		return err
	}
	if got, err := r.splitOf(rs); err != nil || got != s {
		return fmt.Errorf("route53 %s %s: records say %v, not %v: changed by someone else? %w", r.cfg.RecordName, r.cfg.RecordType, got, s, err)
	}
	return r.waitTTL(ctx, r.ttl(rs))
}

// waitChange waits until the last change batch is INSYNC on every Route 53 server.
func (r *route53Switcher) waitChange(ctx context.Context) error {
	if r.lastChange == "" {
		return nil // nothing changed by this process (a resumed run): the records are read instead
	}
	maxWait := 30 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		maxWait = time.Until(d)
	}
	waiter := route53.NewResourceRecordSetsChangedWaiter(r.client, func(o *route53.ResourceRecordSetsChangedWaiterOptions) {
		o.MinDelay = r.opts.PollInterval
		o.MaxDelay = max(r.opts.PollInterval, 30*time.Second)
	})
	if err := waiter.Wait(ctx, &route53.GetChangeInput{Id: aws.String(r.lastChange)}, maxWait); err != nil {
		return fmt.Errorf("route53 change %s of %s: not INSYNC: %w", r.lastChange, r.cfg.RecordName, err)
	}
	return nil
}

// waitTTL lets resolvers' cached answers expire.
func (r *route53Switcher) waitTTL(ctx context.Context, ttl int64) error {
	r.opts.Logger.Info("route53: waiting for cached answers to expire", "record", r.cfg.RecordName, "ttl", ttl)
	t := time.NewTimer(time.Duration(ttl) * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("route53 %s: waiting out the TTL of %ds: %w", r.cfg.RecordName, ttl, context.Cause(ctx))
	case <-t.C:
		return nil
	}
}

func (r *route53Switcher) Restore(ctx context.Context, st State) error {
	var saved recordSets
	if err := json.Unmarshal(st, &saved); err != nil {
		return fmt.Errorf("route53: saved state: %w", err)
	}
	if len(saved.list()) == 0 {
		return errors.New("route53: the saved state holds no record")
	}
	rs, err := r.records(ctx)
	if err != nil {
		return err
	}
	// Delete what differs from the saved records, put back what is missing: one atomic batch.
	// UPSERT rather than CREATE: the same for Route 53 within a batch, and accepted by
	// implementations (moto) that check a CREATE before the batch's DELETEs.
	var changes []types.Change
	now, want := rs.list(), saved.list()
	for i := range now {
		if !containsRecord(want, now[i]) {
			changes = append(changes, types.Change{Action: types.ChangeActionDelete, ResourceRecordSet: &now[i]})
		}
	}
	for i := range want {
		if !containsRecord(now, want[i]) {
			changes = append(changes, types.Change{Action: types.ChangeActionUpsert, ResourceRecordSet: &want[i]})
		}
	}
	ttl := r.ttl(saved)
	if len(changes) > 0 {
		r.opts.Logger.Info("route53: restoring the saved records", "record", r.cfg.RecordName, "changes", len(changes))
		if err := r.change(ctx, changes, "ferry: restore", ttl); err != nil {
			return err
		}
		if err := r.waitChange(ctx); err != nil {
			return err
		}
	}
	return r.waitTTL(ctx, ttl)
}

func containsRecord(list []types.ResourceRecordSet, rec types.ResourceRecordSet) bool {
	key := func(r types.ResourceRecordSet) string {
		r.Name = aws.String(canonical(aws.ToString(r.Name)))
		data, _ := json.Marshal(r)
		return string(data)
	}
	for _, r := range list {
		if key(r) == key(rec) {
			return true
		}
	}
	return false
}
