package plans

import (
	"fmt"
	"time"
)

// Default throughputs for estimates; ferry.yaml's throughput section overrides them with figures
// measured on the user's own clusters and storage.
const (
	defaultObjectsPerSecond = 500
	defaultVolumeMiBPerSec  = 100
	defaultDBMiBPerSec      = 50
	defaultBucketMiBPerSec  = 100
)

func estimate(p *Plan) Estimate {
	t := p.Config.Throughput
	rate := func(v, def float64) float64 {
		if v > 0 {
			return v
		}
		return def
	}
	var e Estimate
	for _, r := range p.Resources {
		e.Objects += r.Count
		e.ObjectBytes += r.Bytes
	}
	for _, v := range p.Volumes {
		if v.FilesUnread() == "" { // a database's or bucket's is counted with it; others do not move
			e.VolumeBytes += v.Bytes
		}
	}
	for _, d := range p.Databases {
		if d.Found {
			e.DatabaseBytes += d.Bytes
		}
	}
	for _, b := range p.Buckets {
		if b.Found {
			e.BucketBytes += b.Bytes
		}
	}
	mib := float64(1 << 20)
	seconds := float64(e.Objects)/rate(t.ObjectsPerSecond, defaultObjectsPerSecond) +
		float64(e.VolumeBytes)/mib/rate(t.VolumeMiBPerSec, defaultVolumeMiBPerSec) +
		float64(e.DatabaseBytes)/mib/rate(t.DatabaseMiBPerSec, defaultDBMiBPerSec) +
		float64(e.BucketBytes)/mib/rate(t.BucketMiBPerSec, defaultBucketMiBPerSec)
	e.Duration = time.Duration(seconds * float64(time.Second)).Round(time.Second)
	e.Basis = fmt.Sprintf("volume, database and bucket sizes are upper bounds from their claims' capacity; "+
		"rates %.0f objects/s, %.0f MiB/s volumes, %.0f MiB/s databases, %.0f MiB/s buckets",
		rate(t.ObjectsPerSecond, defaultObjectsPerSecond), rate(t.VolumeMiBPerSec, defaultVolumeMiBPerSec),
		rate(t.DatabaseMiBPerSec, defaultDBMiBPerSec), rate(t.BucketMiBPerSec, defaultBucketMiBPerSec))
	return e
}
