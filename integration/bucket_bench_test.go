package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"golang.org/x/sync/errgroup"
)

// BenchmarkBackupBucket backs up blue's platform bucket holding FERRY_BENCH_BUCKET_OBJECTS objects
// of 1 MiB (200 by default) and reports the time of the backup's bucket kind (ferry's own
// "captured" log line) as bucket MB/s, beside the raw reference of the same run:
//   - raw-read: every object read straight from blue's MinIO, 8 at a time, as ferry reads them
//     (but not through the API server's port-forward);
//   - first: ferry backup into new storage, every object read through the port-forward;
//   - unchanged: ferry backup into the same storage after it, nothing changed: every object's
//     file is copied from the first backup in the storage, and read back to check it. It reports
//     how many times faster than the first it was.
//
// Both into the backup MinIO (s3/: CopyObject, which MinIO carries out as a write of the object)
// and into a folder (file/: a hard link).
//
// Run: go test -run '^$' -bench BackupBucket -benchtime 2x ./integration/
func BenchmarkBackupBucket(b *testing.B) {
	blueMinIO(b)
	ctx := context.Background()
	n := envCount(b, "FERRY_BENCH_BUCKET_OBJECTS", 200)
	s3c := tb.MinIO["blue"].S3Client()
	rng := rand.NewChaCha8([32]byte{9})
	var keys []string
	for i := range n {
		data := make([]byte, 1<<20)
		rng.Read(data)
		key := fmt.Sprintf("bench/%04d.bin", i)
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			b.Fatal(err)
		}
		keys = append(keys, key)
	}
	b.Cleanup(func() {
		for _, k := range keys {
			s3c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(k)})
		}
	})
	size := int64(n) << 20
	took := regexp.MustCompile(`kind=buckets took=(\S+)`)
	backup := func(url string) time.Duration {
		b.Helper()
		cmd := exec.Command(ferryBinary(b), ferryArgs(b, []string{"--storage", url, "backup", "--from", "blue", "--preset", "kubeflow",
			"--name", fmt.Sprintf("bench-%d", time.Now().UnixNano())})...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+tb.Kubeconfig)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil && cmd.ProcessState.ExitCode() != 3 { // 3: what the platform lacks (a database without a running pod) is skipped
			b.Fatalf("ferry backup: %v\n%s", err, stderr.String())
		}
		m := took.FindStringSubmatch(stderr.String())
		if m == nil {
			b.Fatalf("ferry backup logged no time of its buckets:\n%s", stderr.String())
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	for _, mode := range []string{"raw-read", "s3/first", "s3/unchanged", "file/first", "file/unchanged"} {
		kind, step, _ := strings.Cut(mode, "/")
		storageURL := func() string {
			if kind == "file" {
				return "file://" + b.TempDir()
			}
			return backupMinIO(b, fmt.Sprintf("bench-bucket-%d", time.Now().UnixNano()))
		}
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			var total time.Duration
			var firsts time.Duration
			for range b.N {
				switch step {
				case "":
					start := time.Now()
					g, gctx := errgroup.WithContext(ctx)
					g.SetLimit(8)
					for _, k := range keys {
						g.Go(func() error {
							out, err := s3c.GetObject(gctx, &s3.GetObjectInput{Bucket: aws.String(testbed.PlatformBucket), Key: aws.String(k)})
							if err != nil {
								return err
							}
							defer out.Body.Close()
							_, err = io.Copy(io.Discard, out.Body)
							return err
						})
					}
					if err := g.Wait(); err != nil {
						b.Fatal(err)
					}
					total += time.Since(start)
				case "first":
					total += backup(storageURL())
				case "unchanged":
					url := storageURL()
					firsts += backup(url)
					total += backup(url)
				}
			}
			// The bucket kind's own time, not the whole command's (planning, the other kinds).
			b.ReportMetric(float64(size*int64(b.N))/total.Seconds()/1e6, "bucket-MB/s")
			if step == "unchanged" {
				b.ReportMetric(firsts.Seconds()/total.Seconds(), "x-faster-than-first")
			}
		})
	}
}
