// SPDX-License-Identifier: Apache-2.0

//go:build unix

package llm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/metrale/gpurt/internal/tinyckpt"
)

// A checkpoint file that is not a regular file (a FIFO would hang a plain
// open; a device would be read without end) is an error naming the file,
// at once; a symbolic link to a regular file (the Hugging Face cache's
// layout) still opens.
func TestCheckpointFilesMustBeRegular(t *testing.T) {
	spec := tinySpecs()["llama gqa untied"]
	sharded := spec
	sharded.Shards = 2
	fifo := func(t *testing.T, p string) {
		require.NoError(t, os.Remove(p))
		require.NoError(t, unix.Mkfifo(p, 0o600))
	}
	// moveAndLink moves p into a blobs folder and links p to it.
	moveAndLink := func(t *testing.T, p string) string {
		blob := filepath.Join(t.TempDir(), "blob-"+filepath.Base(p))
		require.NoError(t, os.Rename(p, blob))
		require.NoError(t, os.Symlink(blob, p))
		return blob
	}
	for _, tc := range []struct {
		name   string
		spec   tinyckpt.Spec
		file   string
		change func(t *testing.T, p string)
		want   []string // nil: it opens
	}{
		{"shard is a FIFO", spec, "model.safetensors", fifo, []string{"model.safetensors is not a regular file but a named pipe"}},
		{"index is a FIFO", sharded, "model.safetensors.index.json", fifo,
			[]string{"model.safetensors.index.json is not a regular file but a named pipe"}},
		{"named shard is a FIFO", sharded, "model-00002-of-00002.safetensors", fifo,
			[]string{"model-00002-of-00002.safetensors is not a regular file but a named pipe"}},
		{"link to a FIFO", spec, "model.safetensors", func(t *testing.T, p string) { fifo(t, moveAndLink(t, p)) },
			[]string{"model.safetensors is not a regular file but a named pipe"}},
		{"link to a character device", spec, "model.safetensors", func(t *testing.T, p string) {
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Symlink("/dev/zero", p))
		}, []string{"model.safetensors is not a regular file but a character device"}},
		{"shard is a directory", spec, "model.safetensors", func(t *testing.T, p string) {
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Mkdir(p, 0o700))
		}, []string{"model.safetensors is not a regular file but a directory"}},
		{"links to regular files", sharded, "model-00001-of-00002.safetensors", func(t *testing.T, p string) {
			moveAndLink(t, p)
			moveAndLink(t, filepath.Join(filepath.Dir(p), "model.safetensors.index.json"))
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := tinyckpt.Write(dir, tc.spec)
			require.NoError(t, err)
			tc.change(t, filepath.Join(dir, tc.file))
			done := make(chan error, 1)
			go func() {
				ck, err := OpenCheckpoint(dir)
				if err == nil {
					ck.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if tc.want == nil {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
				assert.Contains(t, err.Error(), "llm: "+dir)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w)
				}
			case <-time.After(time.Second):
				t.Fatal("OpenCheckpoint blocked on a non-regular file")
			}
		})
	}
	t.Run("config.json is a FIFO", func(t *testing.T) {
		dir := t.TempDir()
		_, err := tinyckpt.Write(dir, spec)
		require.NoError(t, err)
		fifo(t, filepath.Join(dir, "config.json"))
		done := make(chan error, 1)
		go func() { _, err := ReadConfig(dir); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err)
			assert.Contains(t, err.Error(), "llm: model config: "+filepath.Join(dir, "config.json")+" is not a regular file but a named pipe")
		case <-time.After(time.Second):
			t.Fatal("ReadConfig blocked on a FIFO")
		}
	})
}
