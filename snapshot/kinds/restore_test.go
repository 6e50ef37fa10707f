package kinds

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
)

// events records what the fake kinds did, in order.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) index(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Index(e.got, s)
}

type fakeKind struct {
	name string
	ev   *events
	// fill, for the objects: what RestoreFilling does with the Fill.
	fill func(ctx context.Context, f *snapshot.Fill) error
}

func (k fakeKind) Name() string { return k.name }
func (k fakeKind) Restore(ctx context.Context, _ *snapshot.Reader, _ *snapshot.Report) error {
	k.ev.add(k.name)
	return nil
}
func (k fakeKind) Verify(context.Context, *snapshot.Reader, *snapshot.Report) error { return nil }

type fakeObjects struct{ fakeKind }

func (k fakeObjects) RestoreFilling(ctx context.Context, _ *snapshot.Reader, _ *snapshot.Report, f *snapshot.Fill) error {
	return k.fill(ctx, f)
}

type fakeVolumes struct{ fakeKind }

func (fakeVolumes) FillsClaims() {}

func TestRestoreAllFillsVolumesBeforeWhatMountsThem(t *testing.T) {
	run := func(ctx context.Context, k snapshot.Restorer, f *snapshot.Fill) error {
		if f != nil {
			return k.(snapshot.FillingRestorer).RestoreFilling(ctx, nil, nil, f)
		}
		return k.Restore(ctx, nil, nil)
	}
	stopped := errors.New("the objects' restore stopped")
	for _, tc := range []struct {
		name string
		// objects is the objects' restore: it signals and records.
		objects func(ctx context.Context, f *snapshot.Fill, ev *events) error
		want    func(t *testing.T, ev *events, err error)
	}{
		{
			name: "volumes fill once the claims exist; databases start before the held workloads; those wait for the volumes",
			objects: func(ctx context.Context, f *snapshot.Fill, ev *events) error {
				ev.add("claims")
				f.ClaimsExist()
				ev.add("everything but the held")
				f.ObjectsReady(nil)
				if err := f.WaitFilled(ctx); err != nil {
					return err
				}
				ev.add("held workloads")
				return nil
			},
			want: func(t *testing.T, ev *events, err error) {
				if err != nil {
					t.Fatal(err)
				}
				order := func(a, b string) {
					if ia, ib := ev.index(a), ev.index(b); ia < 0 || ib < 0 || ia > ib {
						t.Errorf("%q must come before %q: %v", a, b, ev.got)
					}
				}
				order("claims", "volumes")
				order("volumes", "held workloads")
				order("everything but the held", "databases")
			},
		},
		{
			name: "objects that stop before the claims exist: nothing else runs",
			objects: func(ctx context.Context, f *snapshot.Fill, ev *events) error {
				return stopped
			},
			want: func(t *testing.T, ev *events, err error) {
				if !errors.Is(err, stopped) {
					t.Fatalf("error %v, want the objects'", err)
				}
				if len(ev.got) != 0 {
					t.Fatalf("kinds ran after the objects stopped: %v", ev.got)
				}
			},
		},
		{
			name: "objects that stop after the claims exist: the volumes run, the databases do not",
			objects: func(ctx context.Context, f *snapshot.Fill, ev *events) error {
				f.ClaimsExist()
				if err := f.WaitFilled(ctx); err != nil {
					return err
				}
				return stopped
			},
			want: func(t *testing.T, ev *events, err error) {
				if !errors.Is(err, stopped) {
					t.Fatalf("error %v, want the objects'", err)
				}
				if !slices.Equal(ev.got, []string{"volumes"}) {
					t.Fatalf("ran %v, want the volumes only", ev.got)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			objects := fakeObjects{fakeKind{name: "objects", ev: ev, fill: func(ctx context.Context, f *snapshot.Fill) error { return tc.objects(ctx, f, ev) }}}
			kinds := []snapshot.Restorer{objects, fakeVolumes{fakeKind{name: "volumes", ev: ev}}, fakeKind{name: "databases", ev: ev}}
			tc.want(t, ev, restoreAll(context.Background(), kinds, run))
		})
	}
}

// Without a kind that fills claims, or with objects that cannot hold, every kind waits for the
// objects' restore to end, as before.
func TestRestoreAllWithoutFilling(t *testing.T) {
	ev := &events{}
	run := func(ctx context.Context, k snapshot.Restorer, f *snapshot.Fill) error {
		if f != nil {
			t.Fatalf("%s was given a Fill", k.Name())
		}
		return k.Restore(ctx, nil, nil)
	}
	kinds := []snapshot.Restorer{fakeKind{name: "objects", ev: ev}, fakeVolumes{fakeKind{name: "volumes", ev: ev}}, fakeKind{name: "databases", ev: ev}}
	if err := restoreAll(context.Background(), kinds, run); err != nil {
		t.Fatal(err)
	}
	if ev.index("objects") != 0 || len(ev.got) != 3 {
		t.Fatalf("ran %v, want the objects first, then the two others", ev.got)
	}
}
