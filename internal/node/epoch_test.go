package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBootEpochRisesAtEveryStart(t *testing.T) {
	dir := t.TempDir()
	for want := uint64(1); want <= 3; want++ {
		got, err := nextBootEpoch(dir)
		if err != nil || got != want {
			t.Fatalf("start %d: nextBootEpoch = %d, %v; want %d", want, got, err, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, bootEpochFile))
	if err != nil || string(data) != "3" {
		t.Errorf("%s holds %q, %v; want 3", bootEpochFile, data, err)
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
	if err := os.WriteFile(path, []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte("12"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := nextBootEpoch(dir); err != nil || got != 8 {
		t.Fatalf("nextBootEpoch = %d, %v; want 8", got, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is still there: %v", err)
	}
}

// TestBootEpochDamaged: a file that does not hold an epoch stops the node
// rather than starting the epochs again from 1, which would repeat ids.
func TestBootEpochDamaged(t *testing.T) {
	for _, content := range []string{"", "x1", "0", "-3", "18446744073709551616"} {
		dir := t.TempDir()
		path := filepath.Join(dir, bootEpochFile)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := nextBootEpoch(dir)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("epoch file holding %q: err = %v, want one naming the damaged file", content, err)
		}
		if data, _ := os.ReadFile(path); string(data) != content {
			t.Errorf("the damaged file was overwritten with %q", data)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, bootEpochFile), []byte("18446744073709551615"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := nextBootEpoch(dir); err == nil || !strings.Contains(err.Error(), "new data directory") {
		t.Errorf("at the largest epoch: err = %v, want one saying to use a new data directory", err)
	}
}
