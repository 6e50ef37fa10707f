package integration

import (
	"context"
	"sync"
	"testing"
)

// The platform's data on blue (testbed.SeedMySQL, SeedMinIO), set up once per package run and
// shared by the tests that back it up, restore it or migrate it.
var (
	mysqlOnce, minioOnce sync.Once
	mysqlErr, minioErr   error
	// bucketObjects is what blue's mlpipeline bucket holds.
	bucketObjects map[string][]byte
)

// blueMySQL runs the platform's MySQL pod on blue (its exec served by blue's MariaDB) with two
// schemas: mlpipeline (run_details of 500 rows, empty_table) and cachedb (2 rows).
func blueMySQL(t testing.TB) {
	t.Helper()
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	mysqlOnce.Do(func() {
		mysqlErr = tb.SeedMySQL(context.Background(), blue, tb.DataDir)
	})
	if mysqlErr != nil {
		t.Fatal(mysqlErr)
	}
	runningPod(t, kc, "kubeflow", "app=mysql")
}

// blueMinIO runs the platform's MinIO pod on blue (port 9000 served by blue's MinIO) with the
// mlpipeline bucket holding bucketObjects: nested keys, a 5 MiB object, an empty one, odd names.
func blueMinIO(t testing.TB) map[string][]byte {
	t.Helper()
	applyPlatform(t)
	blue, kc := clients(t, "blue")
	minioOnce.Do(func() {
		bucketObjects, minioErr = tb.SeedMinIO(context.Background(), blue, tb.DataDir)
	})
	if minioErr != nil {
		t.Fatal(minioErr)
	}
	runningPod(t, kc, "kubeflow", "app=minio")
	return bucketObjects
}
