package integration

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/utils/ptr"
)

// TestCarryBackOfATamperedBackupLeavesBlue migrates blue to green, lets green take writes (a row
// of database kfp-mysql, a changed file of a claim), and starts rollback --carry-back, killed
// once green's backup is done. In storage, one byte of that backup's volume stream is flipped and
// its database dump cut to half. The resumed carry-back must exit non-zero naming the volume and
// the database, leave traffic on green, and leave blue's claim folder (bytes, modes, times) and
// blue's schemas (tables, row counts, checksums), read here with os and plain SQL, as they were.
func TestCarryBackOfATamperedBackupLeavesBlue(t *testing.T) {
	blueMySQL(t)
	blueMinIO(t)
	_, greenKC := cutover(t)
	blue, blueKC := clients(t, "blue")
	ctx := context.Background()
	blueDB, greenDB := tb.MariaDB["blue"], tb.MariaDB["green"]
	removeCarryBack(t, blueKC, greenKC) // what an interrupted earlier run may have left
	t.Cleanup(func() { removeCarryBack(t, blueKC, greenKC) })

	// Blue's data: a claim's files and a table of the platform's mlpipeline schema.
	createClaim(t, blueKC, carryNS, carryClaim, ptr.To("gp3"))
	blueDir := dataDir(t, carryNS+"-tampered-"+carryClaim)
	writeClaimFiles(t, blueDir, map[string][]byte{
		"keep.txt":       []byte("kept as it is\n"),
		"change.txt":     []byte("written on blue\n"),
		"dir/nested.txt": []byte("nested, kept\n"),
	})
	if err := blue.BindClaim(ctx, carryNS, carryClaim, blueDir); err != nil {
		t.Fatal(err)
	}
	if _, err := blueDB.SQL(ctx, tb.Bins, `DROP TABLE IF EXISTS `+carryTable+`;
CREATE TABLE `+carryTable+` (id INT PRIMARY KEY, note VARCHAR(64));
INSERT INTO `+carryTable+` VALUES (1, 'one'), (2, 'two');`); err != nil {
		t.Fatal(err)
	}

	// The migration to green, behind HAProxy.
	blueSrv, greenSrv := colorServer(t, "blue", nil), colorServer(t, "green", nil)
	h, err := tb.StartHAProxy(ctx, "carry-back-tampered", blueSrv.Listener.Addr().String(), greenSrv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop() }) // after the closing rollback below, which puts its weights back
	blueWeight := func() string {
		t.Helper()
		out, err := h.Command(ctx, "get weight "+h.Backend+"/"+h.BlueServer)
		if err != nil {
			t.Fatalf("HAProxy's weight of blue: %v", err)
		}
		return strings.TrimSpace(out)
	}
	url := backupMinIO(t, "carry-back-tampered")
	code, out, errOut := runFerry(t, "--storage", url, "migrate", "--from", "blue", "--to", "cutover", "-f", migrateConfig(t, h, greenSrv.URL),
		"--allow-skipped", "--lease-ttl", testLeaseTTL.String())
	id := runID(t, errOut)
	// Blue's writers run again and traffic goes back whatever happens: later tests use blue.
	t.Cleanup(func() {
		if code, out, errOut := runFerry(t, "--storage", url, "rollback", "--run", id, "--discard-green-writes"); code != 0 {
			t.Errorf("the closing rollback --discard-green-writes exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
	wantEnded(t, url, id, "ferry migrate", code, out, errOut)
	if !strings.Contains(out, "shifted") {
		t.Fatalf("ferry migrate did not shift\nstdout: %s\nstderr: %s", out, errOut)
	}

	// Green takes writes.
	if _, err := greenDB.SQL(ctx, tb.Bins, `INSERT INTO `+carryTable+` VALUES (3, 'three, written on green');`); err != nil {
		t.Fatal(err)
	}
	writeClaimFiles(t, claimFolder(t, greenKC, carryNS, carryClaim), map[string][]byte{"change.txt": bytes.Repeat([]byte("changed on green\n"), 4096)})

	// The carry-back, killed once green's backup is done.
	carryBack := []string{"--storage", url, "rollback", "--run", id, "--carry-back", "--lease-ttl", testLeaseTTL.String()}
	if code, out, errOut := runFerry(t, append(slices.Clone(carryBack), "--crash-at", "green-backed-up:done")...); code != -1 {
		t.Fatalf("rollback --carry-back should have been killed at green-backed-up:done, exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	time.Sleep(testLeaseTTL + 500*time.Millisecond) // the killed run's lease expires

	// In storage: one byte of the volume stream flipped, the dump cut to half.
	backup := migrate.CarryBackName(id)
	store, m := readManifest(t, url, backup)
	vi := slices.IndexFunc(m.Volumes, func(v snapshot.Volume) bool { return v.Namespace == carryNS && v.Name == carryClaim })
	di := slices.IndexFunc(m.Databases, func(d snapshot.Database) bool { return d.Name == "kfp-mysql" })
	if vi < 0 || di < 0 {
		t.Fatalf("the backup of green %s lacks the volume %s/%s or the database kfp-mysql: %d volumes, %d databases", backup, carryNS, carryClaim, len(m.Volumes), len(m.Databases))
	}
	volumeKey, dumpKey := snapshot.Prefix(backup)+m.Volumes[vi].Key, snapshot.Prefix(backup)+m.Databases[di].Key
	stream := getObject(t, store, volumeKey)
	if err := store.Put(ctx, volumeKey, bytes.NewReader(flipByte(stream, len(stream)/2))); err != nil {
		t.Fatal(err)
	}
	dump := getObject(t, store, dumpKey)
	if err := store.Put(ctx, dumpKey, bytes.NewReader(dump[:len(dump)/2])); err != nil {
		t.Fatal(err)
	}
	t.Logf("tampered with %s: byte %d of %d of the volume stream %s flipped, the dump %s cut from %d to %d bytes",
		backup, len(stream)/2, len(stream), m.Volumes[vi].Key, m.Databases[di].Key, len(dump), len(dump)/2)

	// Blue as it is now, read independently of ferry.
	blueFolder := claimFolder(t, blueKC, carryNS, carryClaim)
	schemas := m.Databases[di].Schemas
	schemaState := func() string {
		var s string
		for _, schema := range schemas {
			s += mysqlState(t, blueDB, schema)
		}
		return s
	}
	filesBefore, schemasBefore := folderState(t, blueFolder), schemaState()
	if !strings.Contains(schemasBefore, "carry_back_rows") {
		t.Fatalf("blue's schemas %v as read before do not show %s:\n%s", schemas, carryTable, schemasBefore)
	}

	// The resumed carry-back: it fails naming both, and blue is as it was.
	start := time.Now()
	code, out, errOut = runFerry(t, carryBack...)
	took := time.Since(start)
	t.Logf("the carry-back of the tampered backup exited %d after %s\nstdout: %s\nstderr: %s", code, took.Round(time.Millisecond), out, errOut)
	if code == 0 {
		t.Errorf("the carry-back of the tampered backup exited 0, want non-zero")
	}
	for _, want := range []string{"volume " + carryNS + "/" + carryClaim, "database kfp-mysql"} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("the carry-back of the tampered backup does not name %q", want)
		}
	}
	if after := folderState(t, blueFolder); !slices.Equal(filesBefore, after) {
		t.Errorf("the carry-back of the tampered backup changed blue's %s/%s:\n%s", carryNS, carryClaim, lineDiff(filesBefore, after))
	}
	if after := schemaState(); after != schemasBefore {
		t.Errorf("the carry-back of the tampered backup changed blue's schemas %v:\nbefore:\n%s\nafter:\n%s", schemas, schemasBefore, after)
	}
	if got := rows(t, blueDB, carryTable); got != "1\tone\n2\ttwo\n" {
		t.Errorf("blue's rows after the failed carry-back: %q, want blue's own", got)
	}
	if w := blueWeight(); !strings.HasPrefix(w, "0 ") {
		t.Errorf("blue's weight after the failed carry-back: %q, want 0 (traffic stays on green)", w)
	}
	j := journal(t, url, id)
	if rep := migrate.BuildReport(j); rep.State == migrate.RolledBack {
		t.Errorf("the report says rolled back after the carry-back failed: %+v", rep)
	}
	for _, e := range j.Events() {
		if e.Phase == migrate.Done && (e.State == migrate.CarriedBack || e.State == migrate.BlueVerified || e.State == migrate.RolledBack) {
			t.Errorf("the journal says %s done after the carry-back failed: %q", e.State, e.Detail)
		}
		if e.Phase == migrate.Failed {
			t.Logf("journal: %s failed: %s", e.State, e.Detail)
		}
		if e.Phase == migrate.Note && e.Detail == migrate.NoteCarryingBack {
			t.Errorf("the journal says the carry-back began writing into blue, though it checked the streams first and refused them")
		}
	}
	t.Logf("run %s: blue's folder %d entries and schemas %v (%d lines) unchanged", id, len(filesBefore), schemas, strings.Count(schemasBefore, "\n"))
}
