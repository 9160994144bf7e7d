package node

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/internal/vfs"
)

func writeEpochFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBootEpochRisesAtEveryStart(t *testing.T) {
	dir := t.TempDir()
	for want := uint64(1); want <= 3; want++ {
		got, err := nextBootEpoch(dir)
		if err != nil || got != want {
			t.Fatalf("start %d: nextBootEpoch = %d, %v; want %d", want, got, err, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, bootEpochFile))
	if want := vfs.Frame(bootEpochMagic, []byte("3")); err != nil || !bytes.Equal(data, want) {
		t.Errorf("%s holds %q, %v; want %q", bootEpochFile, data, err, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data directory holds %d files, want only %s (no temporary file left)", len(entries), bootEpochFile)
	}
}

// TestBootEpochAfterInterruptedWrite: a crash between writing the
// temporary file and renaming it leaves the previous epoch, which the next
// start raises.
func TestBootEpochAfterInterruptedWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, bootEpochFile)
	writeEpochFile(t, path, vfs.Frame(bootEpochMagic, []byte("7")))
	writeEpochFile(t, path+".tmp", vfs.Frame(bootEpochMagic, []byte("12"))[:9])
	if got, err := nextBootEpoch(dir); err != nil || got != 8 {
		t.Fatalf("nextBootEpoch = %d, %v; want 8", got, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is still there: %v", err)
	}
}

// TestBootEpochDamaged: a file that does not hold an epoch, or whose bits
// rotted, stops the node rather than starting the epochs again from 1 or
// from a rotted value, either of which could repeat ids.
func TestBootEpochDamaged(t *testing.T) {
	good := vfs.Frame(bootEpochMagic, []byte("3"))
	contents := [][]byte{
		{}, []byte("3"), good[:len(good)-1],
		vfs.Frame(bootEpochMagic, []byte("x1")),
		vfs.Frame(bootEpochMagic, []byte("0")),
		vfs.Frame(bootEpochMagic, []byte("-3")),
		vfs.Frame(bootEpochMagic, []byte("18446744073709551616")),
	}
	for i := range len(good) * 8 {
		flipped := bytes.Clone(good)
		flipped[i/8] ^= 1 << (i % 8)
		contents = append(contents, flipped)
	}
	for _, content := range contents {
		dir := t.TempDir()
		path := filepath.Join(dir, bootEpochFile)
		writeEpochFile(t, path, content)
		_, err := nextBootEpoch(dir)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("epoch file holding %q: err = %v, want one naming the damaged file", content, err)
		}
		if data, _ := os.ReadFile(path); !bytes.Equal(data, content) {
			t.Errorf("the damaged file was overwritten with %q", data)
		}
	}
	dir := t.TempDir()
	writeEpochFile(t, filepath.Join(dir, bootEpochFile), vfs.Frame(bootEpochMagic, []byte("18446744073709551615")))
	if _, err := nextBootEpoch(dir); err == nil || !strings.Contains(err.Error(), "new data directory") {
		t.Errorf("at the largest epoch: err = %v, want one saying to use a new data directory", err)
	}
}
