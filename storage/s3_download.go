package storage

import (
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// downloadPartSize is the range each concurrent GET of a download fetches. Downloads need not
// follow the upload's parts, so they use smaller ranges and hold less in memory.
const downloadPartSize = 8 << 20

// rangeReader streams an object in order while fetching the ranges ahead of the reader
// concurrently. It replaces the transfer manager's GetObject reader, which fetches only what one
// Read call asks for: with io.Copy's 32 KiB reads it ran at 40 MB/s where ranged GETs reached
// 1.4 GB/s on the same MinIO.
//
// At most concurrency+2 ranges are in memory at once, in buffers that are reused.
type rangeReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	ranges chan chan rangeResult // in object order; each delivers one range when fetched
	free   chan *[]byte          // buffers to reuse; bounds the memory held

	cur []byte // unread rest of the current range
	buf *[]byte
	err error
}

type rangeResult struct {
	buf *[]byte
	n   int
	err error
}

func newRangeReader(ctx context.Context, client *s3.Client, bucket, key, etag string, size int64, concurrency int) *rangeReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &rangeReader{
		ctx: ctx, cancel: cancel,
		ranges: make(chan chan rangeResult, concurrency),
		free:   make(chan *[]byte, concurrency+2),
	}
	for range concurrency + 2 {
		r.free <- nil // allocated on first use, so small objects take little
	}
	go func() {
		defer close(r.ranges)
		for off := int64(0); off < size; off += downloadPartSize {
			length := min(downloadPartSize, size-off)
			result := make(chan rangeResult, 1)
			select {
			case r.ranges <- result:
			case <-ctx.Done():
				return
			}
			var buf *[]byte
			select {
			case buf = <-r.free:
			case <-ctx.Done():
				return
			}
			if buf == nil || len(*buf) < int(length) {
				// Of a part's size but for an object smaller than one, whose one range is all.
				b := make([]byte, length)
				buf = &b
			}
			go func() {
				n, err := fetchRange(ctx, client, bucket, key, etag, off, length, (*buf)[:length])
				result <- rangeResult{buf: buf, n: n, err: err}
			}()
		}
	}()
	return r
}

func fetchRange(ctx context.Context, client *s3.Client, bucket, key, etag string, off, length int64, dst []byte) (int, error) {
	out, err := client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1)),
		// A concurrent overwrite fails the read instead of mixing two versions.
		IfMatch: aws.String(etag),
	}, func(o *s3.Options) {
		// A range carries no checksum to validate; ferry's manifest checks content end to end.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	if err != nil {
		return 0, err
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, dst)
	if err != nil {
		return n, fmt.Errorf("bytes %d-%d: %w", off, off+length-1, err)
	}
	return n, nil
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if err := r.next(); err != nil {
		return 0, err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// WriteTo hands whole ranges to w, which io.Copy prefers to many small reads.
func (r *rangeReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if err := r.next(); err == io.EOF {
			return total, nil
		} else if err != nil {
			return total, err
		}
		n, err := w.Write(r.cur)
		total += int64(n)
		r.cur = r.cur[n:]
		if err != nil {
			return total, err
		}
	}
}

// next makes r.cur the unread rest of the current range, waiting for the next range when it is empty.
func (r *rangeReader) next() error {
	for len(r.cur) == 0 {
		if r.buf != nil {
			r.free <- r.buf
			r.buf = nil
		}
		if r.err != nil {
			return r.err
		}
		result, ok := <-r.ranges
		if !ok {
			if r.err = r.ctx.Err(); r.err == nil {
				r.err = io.EOF
			}
			return r.err
		}
		res := <-result
		if res.err != nil {
			r.err = res.err
			r.cancel()
			return r.err
		}
		r.cur, r.buf = (*res.buf)[:res.n], res.buf
	}
	return nil
}

// Close stops fetching ahead.
func (r *rangeReader) Close() error {
	r.cancel()
	return nil
}
