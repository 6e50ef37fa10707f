package storagetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ferrykube/ferry/storage"
	"golang.org/x/sync/errgroup"
)

// RawUpload uploads r to bucket/key as benchmarks' raw reference: a multipart upload of
// storage.DefaultPartSize parts, storage.DefaultConcurrency at once, with nothing of ferry's
// between the reader and the client.
func RawUpload(ctx context.Context, client *s3.Client, bucket, key string, r io.Reader) error {
	mpu, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return err
	}
	var parts []types.CompletedPart
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(storage.DefaultConcurrency)
	for n := int32(1); ; n++ {
		buf := make([]byte, storage.DefaultPartSize)
		read, err := io.ReadFull(r, buf)
		if read == 0 {
			break
		}
		if err != nil && err != io.ErrUnexpectedEOF {
			return err
		}
		g.Go(func() error {
			out, err := client.UploadPart(gctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key),
				UploadId: mpu.UploadId, PartNumber: aws.Int32(n), Body: bytes.NewReader(buf[:read])})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
			return nil
		})
		if read < len(buf) {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	_, err = client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		UploadId: mpu.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	return err
}

// RawDownload reads bucket/key of size bytes as benchmarks' raw reference: ranged GETs of
// storage.DefaultPartSize, storage.DefaultConcurrency at once, into io.Discard.
func RawDownload(ctx context.Context, client *s3.Client, bucket, key string, size int64) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(storage.DefaultConcurrency)
	for off := int64(0); off < size; off += storage.DefaultPartSize {
		end := min(off+storage.DefaultPartSize, size) - 1
		g.Go(func() error {
			out, err := client.GetObject(gctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
				Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, end))})
			if err != nil {
				return err
			}
			defer out.Body.Close()
			_, err = io.Copy(io.Discard, out.Body)
			return err
		})
	}
	return g.Wait()
}
