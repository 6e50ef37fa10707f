package config

import (
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
)

func TestParseConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "databses: []\n", "line 1: field databses not found"},
		{"wrong type", "databases: {name: x}\n", "line 1: cannot unmarshal"},
		{"bad engine", "databases:\n- {name: db, engine: oracle, namespace: a, workload: deployment/db}\n", `databases[0].engine: "oracle"`},
		{"bad workload", "databases:\n- {name: db, engine: mysql, namespace: a, workload: pod/db}\n", "databases[0].workload"},
		{"duplicate db", "databases:\n- {name: db, engine: mysql, namespace: a, workload: deployment/db}\n- {name: db, engine: mysql, namespace: a, workload: deployment/db}\n", `databases[1].name: "db" used twice`},
		{"database name too long", "databases:\n- {name: " + strings.Repeat("d", 181) + ", engine: mysql, namespace: a, workload: deployment/db}\n", "databases[0].name: \"dddd"},
		{"bucket name too long", "buckets:\n- {name: " + strings.Repeat("b", 181) + ", endpoint: 'http://s3'}\n", "bytes, at most 180"},
		{"bucket without place", "buckets:\n- {name: b}\n", "buckets[0]: needs a workload"},
		{"bucket port", "buckets:\n- {name: b, namespace: kf, workload: deployment/minio}\n", "buckets[0].port"},
		{"empty target", "buckets:\n- {name: b, namespace: kf, workload: deployment/minio, port: 9000, target: {}}\n", "buckets[0].target: empty"},
		{"target workload without port", "buckets:\n- {name: b, namespace: kf, workload: deployment/minio, port: 9000, target: {workload: deployment/seaweedfs}}\n", "buckets[0].target.port: 0"},
		{"target reached two ways", "buckets:\n- {name: b, namespace: kf, workload: deployment/minio, port: 9000, target: {endpoint: 'http://s3', workload: deployment/s3, port: 80}}\n", "buckets[0].target: names both"},
		{"target port of an endpoint", "buckets:\n- {name: b, endpoint: 'http://s3', target: {port: 80}}\n", "buckets[0].target.port: 80"},
		{"database target workload", "databases:\n- {name: db, engine: mysql, namespace: a, workload: deployment/db, target: {workload: db}}\n", "databases[0].target.workload"},
		{"database target secret", "databases:\n- {name: db, engine: mysql, namespace: a, workload: deployment/db, target: {secret: {userKey: u}}}\n", "databases[0].target.secret.name: missing"},
		{"bucket versions", "buckets:\n- {name: b, endpoint: 'http://s3', versions: all}\n", `buckets[0].versions: "all": want current`},
		{"bucket versions, not current", "buckets:\n- {name: b, endpoint: 'http://s3', versions: Current}\n", `buckets[0].versions: "Current"`},
		{"target secret and without", "buckets:\n- {name: b, endpoint: 'http://s3', target: {secret: {name: s}, withoutSecret: true}}\n", "buckets[0].target: names a secret and withoutSecret"},
		{"bad selector", "include: {labelSelector: 'a in (b'}\n", "include.labelSelector"},
		{"exclude by label", "exclude: {labelSelector: app=x}\n", "exclude.labelSelector: not supported"},
		{"bad namespace", "exclude: {namespaces: [Bad_NS]}\n", "exclude.namespaces[0]"},
		{"bad action", "quiesce:\n- {resource: deployments.apps, action: explode}\n", `quiesce[0].action: "explode"`},
		{"annotate without annotations", "quiesce:\n- {resource: notebooks.kubeflow.org, action: annotate}\n", "quiesce[0].annotations"},
		{"negative throughput", "throughput: {volumeMiBPerSecond: -1}\n", "throughput.volumeMiBPerSecond"},
		{"two documents", "preset: kubeflow\n---\npreset: other\n", "more than one YAML document"},
		{"sensitive without a resource", "sensitive:\n- {paths: [data.token]}\n", `sensitive[0].resource: ""`},
		{"sensitive kind, not resource", "sensitive:\n- {resource: ConfigMap}\n", `sensitive[0].resource: "ConfigMap"`},
		{"sensitive list index", "sensitive:\n- {resource: deployments.apps, paths: [\"spec.template.spec.containers[0].env\"]}\n", "sensitive[0].paths[0]"},
		{"not yaml", "databases: [\n", "ferry.yaml: "},
		{"many namespaces to one", "namespaceMap: {a: x, b: x}\n", "namespaceMap: a and b are both mapped to x"},
		{"namespace map, not a namespace", "namespaceMap: {a: X_Y}\n", `namespaceMap: "X_Y" is not a namespace name`},
		{"empty storage class", "storageClassMap: {gp3: ''}\n", `storageClassMap: "gp3": "": names must not be empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("ferry.yaml", []byte(tc.yaml))
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ferry.yaml: ") {
				t.Fatalf("ParseConfig(%q) = %v, want a bad-input error starting with the file name and naming %q", tc.yaml, err, tc.want)
			}
		})
	}
}

func TestParseConfigAcceptsAFullFile(t *testing.T) {
	cfg, err := ParseConfig("ferry.yaml", []byte(`
preset: kubeflow
include: {namespaces: [kubeflow, team-a], labelSelector: "tier!=cache"}
exclude: {resources: [secrets, profiles.kubeflow.org]}
databases:
- {name: kfp-mysql, engine: mysql, namespace: kubeflow, workload: deployment/mysql, secret: {name: s, passwordKey: p}}
- {name: extra, engine: postgresql, namespace: team-a, workload: statefulset/pg}
buckets:
- {name: data, endpoint: "https://s3.example", secret: {name: s3}}
- {name: history, endpoint: "https://s3.example", versions: current}
storageClassMap: {gp3: standard}
throughput: {volumeMiBPerSecond: 250}
sensitive:
- {resource: configmaps, paths: [data.token, 'metadata.annotations["example.com/key"]']}
- {resource: deployments.apps, paths: ["spec.template.spec.containers[*].env"]}
- {resource: databaseusers.example.com}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Sensitivity("databaseusers.example.com"); !s.All {
		t.Errorf("sensitivity of databaseusers.example.com %+v; want all", s)
	}
	if len(cfg.Databases) != 2 || len(cfg.Buckets) != 2 || cfg.Buckets[1].Versions != VersionsCurrent || cfg.Throughput.VolumeMiBPerSec != 250 || cfg.StorageClassMap["gp3"] != "standard" {
		t.Fatalf("parsed %+v", cfg)
	}
}

func TestKubeflowPresetMerges(t *testing.T) {
	cfg, err := LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Databases) != 2 || len(cfg.Buckets) != 1 || cfg.Tenants == nil || len(cfg.Quiesce) == 0 {
		t.Fatalf("kubeflow preset: %+v", cfg)
	}
	user, err := ParseConfig("ferry.yaml", []byte("databases:\n- {name: katib-mysql, engine: mysql, namespace: katib, workload: statefulset/db}\n"))
	if err != nil {
		t.Fatal(err)
	}
	merged := cfg.Merge(user)
	if len(merged.Databases) != 2 || merged.Databases[1].Namespace != "katib" {
		t.Fatalf("a user's database of the same name must replace the preset's: %+v", merged.Databases)
	}
	if _, err := LoadPreset("openshift"); err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), "known: kubeflow") {
		t.Fatalf("unknown preset: %v", err)
	}
}

// FuzzParseConfig: no input makes the parser panic, and every error names ferry.yaml.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{"", "preset: kubeflow\n", "databases:\n- {name: a, engine: mysql}\n", "quiesce: [{action: patch}]", "include: {labelSelector: 'x=='}", ":\n- -", "a: &a [*a]"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		_, err := ParseConfig("ferry.yaml", []byte(doc))
		if err != nil && (!badinput.Is(err) || !strings.HasPrefix(err.Error(), "ferry.yaml: ")) {
			t.Fatalf("error %v does not name the file or is not bad input", err)
		}
	})
}

// FuzzConfig: no ferry.yaml makes ParseConfig panic, and every error names the file.
func FuzzConfig(f *testing.F) {
	for _, name := range Presets() {
		data, err := presetFiles.ReadFile("presets/" + name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("databases:\n- name: kfp\n  engine: mysql\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseConfig("ferry.yaml", data); err != nil && !strings.Contains(err.Error(), "ferry.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
