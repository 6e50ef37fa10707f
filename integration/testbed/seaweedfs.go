package testbed

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// SeaweedFS is a SeaweedFS server on 127.0.0.1 (weed mini: master, volume, filer and S3 gateway
// in one process), the S3 store Kubeflow's newer releases keep their pipelines' objects in, in
// place of MinIO. Its keys are its own: a release installed with it has other credentials than
// the MinIO it replaces.
type SeaweedFS struct {
	Name      string   `json:"name"`
	Endpoint  string   `json:"endpoint"` // http://127.0.0.1:PORT, the S3 gateway
	Port      int      `json:"port"`
	AccessKey string   `json:"accessKey"`
	SecretKey string   `json:"secretKey"`
	Process   *Process `json:"process"`
}

func startSeaweedFS(ctx context.Context, bins Binaries, dir, name string) (*SeaweedFS, error) {
	dataDir := filepath.Join(dir, "seaweedfs-"+name)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	w := &SeaweedFS{Name: name, AccessKey: "ferry-testbed-weed", SecretKey: "ferry-testbed-weed-secret"}
	identities := fmt.Sprintf(`{"identities":[{"name":"admin","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, w.AccessKey, w.SecretKey)
	s3Config := filepath.Join(dataDir, "s3.json")
	if err := os.WriteFile(s3Config, []byte(identities), 0o600); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken between asking and binding
		// Every listener on 127.0.0.1 and a port of its own (their defaults are fixed ports);
		// the parts a test does not use are off, and so is telemetry, which would dial out.
		args := []string{bins["weed"], "mini", "-dir=" + dataDir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3.config=" + s3Config,
			"-webdav=false", "-admin.ui=false", "-admin.port.legacy=0", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"}
		ports := map[string]int{}
		for _, flag := range []string{"master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
			"s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc"} {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			ports[flag] = port
			args = append(args, "-"+flag+"="+strconv.Itoa(port))
		}
		w.Port = ports["s3.port"]
		w.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", w.Port)
		p, err := startProcess("seaweedfs-"+name, args, nil, filepath.Join(dir, "seaweedfs-"+name+".log"), nil)
		if err != nil {
			return nil, err
		}
		w.Process = p
		if lastErr = w.waitHealthy(ctx); lastErr == nil {
			return w, nil
		}
		w.Process.stop(5 * time.Second)
	}
	return nil, lastErr
}

// S3Client returns an S3 client with the server's keys.
func (w *SeaweedFS) S3Client() *s3.Client { return s3Client(w.Endpoint, w.AccessKey, w.SecretKey) }

// waitHealthy waits until the S3 gateway answers a signed request: it starts after the master,
// volume server and filer it stores through.
func (w *SeaweedFS) waitHealthy(ctx context.Context) error {
	return waitFor(w.Process, 90*time.Second, "healthy", func() error {
		resp, err := http.Get(w.Endpoint + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		_, err = w.S3Client().ListBuckets(ctx, &s3.ListBucketsInput{})
		return err
	})
}
