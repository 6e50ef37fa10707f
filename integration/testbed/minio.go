package testbed

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The servers of one kind share credentials, as the blue and green copies of a platform do: the
// platform's Secrets move with it, and green's database and MinIO take the credentials restored there.
const (
	sharedPassword  = "ferry-testbed-db"
	sharedAccessKey = "ferry-testbed"
	sharedSecretKey = "ferry-testbed-secret"
)

// KMSKey is the name of the KMS key of the testbed's MinIOs, which SSE-S3 and SSE-KMS encrypt with:
// each server has one of this name, as each cluster's store would have its own KMS.
const KMSKey = "ferry-testbed-key"

// MinIO is a MinIO server on 127.0.0.1.
type MinIO struct {
	Name      string   `json:"name"`
	Endpoint  string   `json:"endpoint"` // http://127.0.0.1:PORT
	Port      int      `json:"port"`
	AccessKey string   `json:"accessKey"`
	SecretKey string   `json:"secretKey"`
	Process   *Process `json:"process"`
	// NoKMS is set for a server without a KMS: it refuses server-side encryption.
	NoKMS bool `json:"noKMS,omitempty"`
}

// AddMinIO starts a MinIO server of that name beside the clusters' (noKMS: without a KMS, as a
// store set up without encryption at rest); RemoveMinIO stops it.
func (tb *Testbed) AddMinIO(ctx context.Context, name string, noKMS bool) (*MinIO, error) {
	if tb.MinIO[name] != nil {
		return nil, fmt.Errorf("testbed: a MinIO named %s runs already", name)
	}
	m, err := startMinIO(ctx, tb.Bins, tb.Dir, name, noKMS)
	if err != nil {
		return nil, fmt.Errorf("testbed: add MinIO %s: %w", name, err)
	}
	tb.MinIO[name] = m
	return m, tb.save()
}

// RemoveMinIO stops the MinIO server AddMinIO started.
func (tb *Testbed) RemoveMinIO(name string) error {
	m := tb.MinIO[name]
	if m == nil {
		return nil
	}
	delete(tb.MinIO, name)
	return errors.Join(m.Process.stop(10*time.Second), tb.save())
}

func startMinIO(ctx context.Context, bins Binaries, dir, name string, noKMS bool) (*MinIO, error) {
	dataDir := filepath.Join(dir, "minio-"+name)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken between asking and binding
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		console, err := freePort()
		if err != nil {
			return nil, err
		}
		m := &MinIO{Name: name, Port: port, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: sharedAccessKey, SecretKey: sharedSecretKey, NoKMS: noKMS}
		m.Process, err = startProcess("minio-"+name,
			[]string{bins["minio"], "server", dataDir, "--address", fmt.Sprintf("127.0.0.1:%d", port), "--console-address", fmt.Sprintf("127.0.0.1:%d", console), "--quiet"},
			m.serverEnv(), filepath.Join(dir, "minio-"+name+".log"), nil)
		if err != nil {
			return nil, err
		}
		if lastErr = m.waitHealthy(); lastErr == nil {
			return m, nil
		}
		m.Process.stop(5 * time.Second)
	}
	return nil, lastErr
}

// S3Client returns an S3 client with the server's root credentials.
func (m *MinIO) S3Client() *s3.Client { return s3Client(m.Endpoint, m.AccessKey, m.SecretKey) }

// s3Client is an S3 client of a testbed store: its endpoint, path-style, with these keys.
func s3Client(endpoint, accessKey, secretKey string) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
	})
}

// Credentials returns a provider of the server's root credentials.
func (m *MinIO) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, "")
}

// Env returns the AWS environment variables that let ferry reach this server as its root user.
func (m *MinIO) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1"}
}

// CreateBucket makes a bucket; an existing one is fine.
func (m *MinIO) CreateBucket(ctx context.Context, bucket string) error {
	_, err := m.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if err != nil {
		if _, err2 := m.S3Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err2 == nil {
			return nil
		}
		return fmt.Errorf("create bucket %s on %s: %w", bucket, m.Name, err)
	}
	return nil
}

// Stop ends the server, as a storage outage would; Restart brings it back.
func (m *MinIO) Stop() error { return m.Process.stop(10 * time.Second) }

// Restart starts a stopped server again on the same port with the same data.
func (m *MinIO) Restart(ctx context.Context) error {
	if m.Process.ours() {
		return nil
	}
	p, err := startProcess(m.Process.Name, m.Process.Args, m.serverEnv(), m.Process.Log, nil)
	if err != nil {
		return err
	}
	m.Process = p
	return m.waitHealthy()
}

func (m *MinIO) serverEnv() []string {
	env := []string{"MINIO_ROOT_USER=" + m.AccessKey, "MINIO_ROOT_PASSWORD=" + m.SecretKey, "MINIO_BROWSER=off", "MINIO_UPDATE=off"}
	if !m.NoKMS {
		// A key of MinIO's built-in KMS, the same on every run: a test's data only.
		key := sha256.Sum256([]byte("ferry testbed " + m.Name))
		env = append(env, "MINIO_KMS_SECRET_KEY="+KMSKey+":"+base64.StdEncoding.EncodeToString(key[:]))
	}
	return env
}

func (m *MinIO) waitHealthy() error {
	return waitFor(m.Process, 60*time.Second, "healthy", func() error {
		resp, err := http.Get(m.Endpoint + "/minio/health/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
}
