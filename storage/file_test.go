package storage_test

import (
	"testing"

	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/storagetest"
)

func TestFileConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		b, err := storage.NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
