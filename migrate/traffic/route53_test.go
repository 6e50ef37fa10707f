package traffic

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/ferrykube/ferry/plans/config"
)

// fakeRoute53 speaks the part of Route 53's REST XML API the switcher uses, with its rules:
// change batches are atomic, CREATE needs a free name, DELETE an exact match, and a name may not
// hold a simple record beside weighted ones. failNext makes the next requests fail with an error
// code, as Route 53 does when throttling.
type fakeRoute53 struct {
	mu       sync.Mutex
	zone     string
	records  []xmlRRSet
	batches  [][]xmlChange
	changes  map[string]int // GetChange calls per change ID
	failNext []string
	failed   int
}

type xmlRRSet struct {
	Name            string `xml:"Name"`
	Type            string `xml:"Type"`
	SetIdentifier   string `xml:"SetIdentifier,omitempty"`
	Weight          *int64 `xml:"Weight,omitempty"`
	TTL             *int64 `xml:"TTL,omitempty"`
	ResourceRecords *struct {
		Values []string `xml:"ResourceRecord>Value"`
	} `xml:"ResourceRecords,omitempty"`
	AliasTarget *struct {
		HostedZoneId         string `xml:"HostedZoneId"`
		DNSName              string `xml:"DNSName"`
		EvaluateTargetHealth bool   `xml:"EvaluateTargetHealth"`
	} `xml:"AliasTarget,omitempty"`
}

type xmlChange struct {
	Action string   `xml:"Action"`
	RRSet  xmlRRSet `xml:"ResourceRecordSet"`
}

func (r xmlRRSet) key() string { return r.Name + " " + r.Type + " " + r.SetIdentifier }

func (r xmlRRSet) String() string {
	data, _ := xml.Marshal(r)
	return string(data)
}

const r53ns = "https://route53.amazonaws.com/doc/2013-04-01/"

func (f *fakeRoute53) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0"?><ErrorResponse xmlns="%s"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>r</RequestId></ErrorResponse>`, r53ns, code, msg)
	}
	if len(f.failNext) > 0 {
		code := f.failNext[0]
		f.failNext = f.failNext[1:]
		f.failed++
		fail(http.StatusBadRequest, code, "try again")
		return
	}
	path := strings.TrimPrefix(req.URL.Path, "/2013-04-01/")
	reply := func(v any) {
		data, err := xml.Marshal(v)
		if err != nil {
			panic(err)
		}
		w.Header().Set("Content-Type", "text/xml")
		io.WriteString(w, xml.Header+string(data))
	}
	type changeInfo struct {
		Id, Status, SubmittedAt string
	}
	switch {
	case path == "hostedzone/"+f.zone && req.Method == http.MethodGet:
		reply(struct {
			XMLName    xml.Name `xml:"GetHostedZoneResponse"`
			Xmlns      string   `xml:"xmlns,attr"`
			HostedZone struct{ Id, Name, CallerReference string }
		}{Xmlns: r53ns, HostedZone: struct{ Id, Name, CallerReference string }{"/hostedzone/" + f.zone, "example.com.", "ref"}})
	case strings.HasPrefix(path, "hostedzone/") && req.Method == http.MethodGet && !strings.HasSuffix(path, "/rrset"):
		fail(http.StatusNotFound, "NoSuchHostedZone", "No hosted zone found with ID: "+strings.TrimPrefix(path, "hostedzone/"))
	case path == "hostedzone/"+f.zone+"/rrset" && req.Method == http.MethodGet:
		start := req.URL.Query().Get("name") + " " + req.URL.Query().Get("type")
		var out []xmlRRSet
		for _, r := range f.records {
			if r.Name+" "+r.Type >= start {
				out = append(out, r)
			}
		}
		reply(struct {
			XMLName            xml.Name   `xml:"ListResourceRecordSetsResponse"`
			Xmlns              string     `xml:"xmlns,attr"`
			ResourceRecordSets []xmlRRSet `xml:"ResourceRecordSets>ResourceRecordSet"`
			IsTruncated        bool
			MaxItems           string
		}{Xmlns: r53ns, ResourceRecordSets: out, MaxItems: "100"})
	case path == "hostedzone/"+f.zone+"/rrset" && req.Method == http.MethodPost:
		var body struct {
			Changes []xmlChange `xml:"ChangeBatch>Changes>Change"`
		}
		if err := xml.NewDecoder(req.Body).Decode(&body); err != nil {
			fail(http.StatusBadRequest, "InvalidInput", err.Error())
			return
		}
		next := append([]xmlRRSet(nil), f.records...)
		find := func(key string) int {
			for i, r := range next {
				if r.key() == key {
					return i
				}
			}
			return -1
		}
		for _, c := range body.Changes {
			i := find(c.RRSet.key())
			switch {
			case c.Action == "CREATE" && i >= 0:
				fail(http.StatusBadRequest, "InvalidChangeBatch", "Tried to create resource record set "+c.RRSet.key()+" but it already exists")
				return
			case c.Action == "DELETE" && (i < 0 || next[i].String() != c.RRSet.String()):
				fail(http.StatusBadRequest, "InvalidChangeBatch", "Tried to delete resource record set "+c.RRSet.key()+" but it was not found")
				return
			case c.Action == "DELETE":
				next = append(next[:i], next[i+1:]...)
			case i >= 0:
				next[i] = c.RRSet
			default:
				next = append(next, c.RRSet)
			}
		}
		simple, weighted := map[string]bool{}, map[string]bool{}
		for _, r := range next {
			if r.SetIdentifier == "" {
				simple[r.Name+r.Type] = true
			} else {
				weighted[r.Name+r.Type] = true
			}
		}
		for k := range simple {
			if weighted[k] {
				fail(http.StatusBadRequest, "InvalidChangeBatch", "RRSet "+k+" is not permitted because a conflicting RRSet exists")
				return
			}
		}
		sort.Slice(next, func(i, j int) bool { return next[i].key() < next[j].key() })
		f.records = next
		f.batches = append(f.batches, body.Changes)
		id := fmt.Sprintf("C%d", len(f.batches))
		f.changes[id] = 0
		reply(struct {
			XMLName    xml.Name `xml:"ChangeResourceRecordSetsResponse"`
			Xmlns      string   `xml:"xmlns,attr"`
			ChangeInfo changeInfo
		}{Xmlns: r53ns, ChangeInfo: changeInfo{"/change/" + id, "PENDING", "2026-01-01T00:00:00Z"}})
	case strings.HasPrefix(path, "change/") && req.Method == http.MethodGet:
		id := strings.TrimPrefix(path, "change/")
		calls, ok := f.changes[id]
		if !ok {
			fail(http.StatusNotFound, "NoSuchChange", id)
			return
		}
		f.changes[id]++
		status := "PENDING" // once, then in sync
		if calls > 0 {
			status = "INSYNC"
		}
		reply(struct {
			XMLName    xml.Name `xml:"GetChangeResponse"`
			Xmlns      string   `xml:"xmlns,attr"`
			ChangeInfo changeInfo
		}{Xmlns: r53ns, ChangeInfo: changeInfo{"/change/" + id, status, "2026-01-01T00:00:00Z"}})
	default:
		fail(http.StatusNotFound, "UnknownOperation", req.Method+" "+req.URL.Path)
	}
}

func simpleRecord(name, value string, ttl int64) xmlRRSet {
	r := xmlRRSet{Name: name, Type: "A", TTL: &ttl}
	r.ResourceRecords = &struct {
		Values []string `xml:"ResourceRecord>Value"`
	}{[]string{value}}
	return r
}

func startFakeRoute53(t *testing.T) (*fakeRoute53, *aws.Config) {
	t.Helper()
	f := &fakeRoute53{zone: "Z0FERRY", changes: map[string]int{},
		records: []xmlRRSet{simpleRecord("app.example.com.", "192.0.2.10", 1), simpleRecord("zzz.example.com.", "192.0.2.99", 300)}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDFERRY", "secret", ""),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = 20 * time.Millisecond })
		}}
	return f, &cfg
}

func route53Config(zone string) config.Traffic {
	return config.Traffic{Type: config.TrafficRoute53, Route53: &config.Route53Traffic{HostedZoneID: zone, RecordName: "App.example.com", RecordType: "A",
		Blue:  config.Route53Target{SetIdentifier: "blue", Values: []string{"192.0.2.10"}},
		Green: config.Route53Target{SetIdentifier: "green", Values: []string{"198.51.100.20"}}}}
}

func TestRoute53ConvertsShiftsAndRestores(t *testing.T) {
	fake, awsCfg := startFakeRoute53(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sw, err := New(ctx, route53Config(fake.zone), Options{AWSConfig: awsCfg, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := sw.Current(ctx); err != nil || got != Green(0) {
		t.Fatalf("a simple record is blue's: Current = %v, %v", got, err)
	}
	elsewhere := route53Config(fake.zone)
	elsewhere.Route53.Blue.Values = []string{"203.0.113.1"}
	sw3, _ := New(ctx, elsewhere, Options{AWSConfig: awsCfg})
	if err := sw3.Preflight(ctx); err == nil || !strings.Contains(err.Error(), "answers [192.0.2.10] but traffic.route53.blue says [203.0.113.1]") {
		t.Errorf("blue's values differ from the simple record's: %v", err)
	}
	saved, err := sw.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, green := range []int{10, 50, 100} {
		start := time.Now()
		if err := sw.Apply(ctx, Green(green)); err != nil {
			t.Fatal(err)
		}
		if err := sw.WaitSettled(ctx, Green(green)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("settled in %s, before the record's TTL of 1 s", d)
		}
		if got, err := sw.Current(ctx); err != nil || got != Green(green) {
			t.Errorf("Current = %v, %v; want %v", got, err, Green(green))
		}
	}
	fake.mu.Lock()
	first := fake.batches[0]
	if len(fake.batches) != 3 || len(first) != 3 || first[0].Action != "DELETE" || first[1].Action != "CREATE" || first[2].Action != "CREATE" {
		t.Errorf("want the simple record converted in one batch (DELETE, CREATE, CREATE) and one batch per step, got %+v", fake.batches)
	}
	if last := fake.batches[2]; len(last) != 2 || last[0].Action != "UPSERT" || *last[0].RRSet.Weight != 0 || *last[1].RRSet.Weight != 100 {
		t.Errorf("last batch %+v: want both weighted records upserted, blue 0 and green 100", last)
	}
	fake.mu.Unlock()

	if err := sw.Restore(ctx, saved); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.records) != 2 || fake.records[0].String() != simpleRecord("app.example.com.", "192.0.2.10", 1).String() {
		t.Fatalf("after Restore: %v, want the simple record back as it was", fake.records)
	}
}

func TestRoute53RetriesThrottlingAndNamesErrors(t *testing.T) {
	fake, awsCfg := startFakeRoute53(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sw, err := New(ctx, route53Config(fake.zone), Options{AWSConfig: awsCfg, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fake.failNext = []string{"Throttling", "PriorRequestNotComplete", "Throttling"}
	if err := sw.Apply(ctx, Green(10)); err != nil {
		t.Fatalf("Apply through throttling: %v", err)
	}
	if fake.failed != 3 {
		t.Errorf("%d requests failed, want 3 retried", fake.failed)
	}
	if got, err := sw.Current(ctx); err != nil || got != Green(10) {
		t.Errorf("Current = %v, %v", got, err)
	}
	missing, err := New(ctx, route53Config("ZNONE"), Options{AWSConfig: awsCfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Preflight(ctx); err == nil || !strings.Contains(err.Error(), "ZNONE") || !strings.Contains(err.Error(), "NoSuchHostedZone") {
		t.Errorf("missing zone: %v", err)
	}
	other := route53Config(fake.zone)
	other.Route53.RecordName = "nothing.example.com"
	sw2, _ := New(ctx, other, Options{AWSConfig: awsCfg})
	if err := sw2.Preflight(ctx); err == nil || !strings.Contains(err.Error(), "no record") {
		t.Errorf("missing record: %v", err)
	}
}
