package repo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"filippo.io/age"

	"github.com/ferrykube/ferry/storage"
)

// BenchmarkRepo writes and reads the same bytes through the repository and, as the reference,
// with a raw Put and Get of one object on the same file backend. go test prints MB/s beside each:
//
//	go test -run '^$' -bench Repo -benchtime 3x ./storage/repo/
func BenchmarkRepo(b *testing.B) {
	const size = 64 << 20
	ctx := context.Background()
	for _, kind := range []string{"random", "text"} {
		data := randomData(20, size)
		if kind == "text" {
			data = textData(size)
		}
		for _, enc := range []bool{false, true} {
			name := fmt.Sprintf("%s/encrypted=%v", kind, enc)
			st, err := storage.NewFile(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			o := Options{SkewMargin: -1}
			if enc {
				id, _ := age.GenerateX25519Identity()
				o.Recipients, o.Identities = []string{id.Recipient().String()}, []age.Identity{id}
			}
			b.Run(name+"/raw-put", func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					if err := st.Put(ctx, "raw", bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/raw-get", func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					rc, err := st.Get(ctx, "raw")
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, rc)
					rc.Close()
				}
			})
			var refs []ChunkRef
			var r *Repo
			b.Run(name+"/write", func(b *testing.B) {
				b.SetBytes(size)
				for i := 0; b.Loop(); i++ {
					o.Prefix = fmt.Sprintf("repo%d/", i) // a fresh repository: every chunk is new
					if r, err = Init(ctx, st, o); err != nil {
						b.Fatal(err)
					}
					w, err := r.NewWriter(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if refs, err = w.Write(ctx, bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/read", func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					if err := r.Read(ctx, refs, io.Discard); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
