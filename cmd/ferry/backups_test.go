package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/snapshot"
)

func TestPrintDescription(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	full := &snapshot.Description{Name: "b1", State: snapshot.Complete, Files: 9, Bytes: 3000, Summary: &snapshot.Summary{
		StartedAt: start, CompletedAt: start.Add(90 * time.Second), DurationSeconds: 90,
		Encryption: &snapshot.Encryption{Format: "age", Recipients: []string{"age1aaa", "age1bbb"}},
		Objects:    3, Kinds: []snapshot.KindCount{{Kind: "ConfigMap", Count: 2}, {Group: "apps", Kind: "Deployment", Count: 1}},
		Databases:   []snapshot.DatabaseSummary{{Name: "kfp-mysql", Engine: "mysql", Schemas: 2, Tables: 3, Rows: 502, DumpBytes: 4096, StoredBytes: 800}},
		Buckets:     []snapshot.BucketSummary{{Name: "mlpipeline", Objects: 4, Bytes: 5 << 20}},
		StoredBytes: 2900,
	}}
	full.Protection = snapshot.ProtectionOf(full.Encryption)
	plainSummary := *full.Summary
	plainSummary.Encryption, plainSummary.Protection = nil, snapshot.ProtectionOf(nil)
	plainSummary.Buckets = []snapshot.BucketSummary{{Name: "mlpipeline", Objects: 4, Bytes: 5 << 20, Reused: 3, ReusedFrom: "b0"}}
	plain := &snapshot.Description{Name: "b2", State: snapshot.Complete, Summary: &plainSummary}
	tests := []struct {
		name string
		d    *snapshot.Description
		want []string
	}{
		{"complete and encrypted", full, []string{
			`Duration:\s+1m30s$`, `Encryption:\s+age, to age1aaa, age1bbb$`, `Velero-compatible:\s+no \(Velero cannot read encrypted archives\)$`,
			`Stored:\s+2.8 KiB in 9 files$`, `OBJECTS  3 `, `  \(core\)\s+ConfigMap\s+2$`, `  apps\s+Deployment\s+1$`,
			`VOLUMES  0$`, `  kfp-mysql\s+mysql\s+2\s+3\s+502\s+4.0 KiB\s+800 B$`, `  mlpipeline\s+4\s+5.0 MiB\s+0 B\s+-$`,
			`NOT IN THIS BACKUP  nothing`,
			`Encrypted:\s+the object archive \(Secrets included\)$`, `\s+database dumps$`, `\s+the digest key of Secrets' digests$`,
			`In plain text:\s+the manifest: names of namespaces, objects, claims, files`, `\s+digests: keyed for Secrets`,
		}},
		{"complete, not encrypted", plain, []string{
			`Encryption:\s+none$`, `  mlpipeline\s+4\s+5.0 MiB\s+0 B\s+3 objects, b0 \(copied in the storage\)$`, `In plain text:\s+everything: the objects \(Secrets included\)`,
		}},
		{"incomplete, its ferry stopped", &snapshot.Description{Name: "half", State: snapshot.Incomplete, Files: 1, Bytes: 7, Run: snapshot.RunDead},
			[]string{`State:\s+incomplete$`, `Stored:\s+7 B in 1 file$`, `Running:\s+no`, "`ferry backups delete half` removes it"}},
		{"running", &snapshot.Description{Name: "live", State: snapshot.Running, Files: 3, Run: snapshot.RunLive, LastBeat: start},
			[]string{`State:\s+running$`, `Running:\s+yes, its heartbeat was stored at 2026-05-01T10:00:00Z: wait for it to finish$`, `Backup live is still being written`}},
		{"velero, no volume data", &snapshot.Description{Name: "v", State: snapshot.Velero, Velero: &snapshot.VeleroSummary{Phase: "Completed"}},
			[]string{`State:\s+velero$`, `VOLUME DATA  none`}},
		{"velero, pod volume backups", &snapshot.Description{Name: "v", State: snapshot.Velero, Velero: &snapshot.VeleroSummary{Phase: "Completed"},
			VeleroVolumes: []snapshot.Skipped{{Kind: "volume", Name: "a/web-0 volume data", Reason: "a pod volume backup"}}},
			[]string{`VOLUME DATA ferry does not restore  1$`, `  a/web-0 volume data: a pod volume backup$`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			if err := printDescription(&out, "file://x", tt.d, ""); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !regexp.MustCompile(`(?m)^` + w).MatchString(out.String()) {
					t.Errorf("no line matches %q:\n%s", w, out.String())
				}
			}
			if tt.d.Run == snapshot.RunLive && strings.Contains(out.String(), "backups delete") {
				t.Errorf("suggests deleting a backup that is being written:\n%s", out.String())
			}
		})
	}
}
