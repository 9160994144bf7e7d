package node

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// bootEpochFile, in the data directory, holds the node's boot epoch: the
// number of times the node has started on that directory. The ids of
// non-persistent events carry it (topic.NonPersistentEventID) ahead of a
// counter that starts again from 1 at every start, so that no id is handed
// out twice. The name has a dot, so no topic or group can clash with it.
const bootEpochFile = "boot.epoch"

// nextBootEpoch raises the boot epoch stored in dir by one and returns the
// new epoch once it is durable: no crash can bring back an epoch that ids
// may have been made with.
func nextBootEpoch(dir string) (uint64, error) {
	path := filepath.Join(dir, bootEpochFile)
	prev, err := readBootEpoch(path)
	if err != nil {
		return 0, err
	}
	if prev == math.MaxUint64 {
		return 0, fmt.Errorf("boot epoch file %s holds the largest epoch there is; non-persistent event ids would repeat: start the node on a new data directory", path)
	}
	epoch := prev + 1
	if err := writeFileDurably(path, strconv.AppendUint(nil, epoch, 10)); err != nil {
		return 0, fmt.Errorf("store the boot epoch: %w; check that the data directory is writable and its disk is not full", err)
	}
	return epoch, nil
}

// readBootEpoch returns the epoch stored at path, 0 if there is none yet.
func readBootEpoch(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the boot epoch: %w", err) // names the file
	}
	epoch, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || epoch == 0 {
		// The file is replaced atomically, so this is not a torn write.
		// Starting again from 1 would hand out ids used before.
		return 0, fmt.Errorf("boot epoch file %s is damaged: it holds %.32q, not a positive number; write into it a number larger than the epoch E of every non-persistent event id (topic/shard/npE.N) this node has handed out", path, data)
	}
	return epoch, nil
}

// writeFileDurably replaces the file at path with data, atomically and
// durably: data is written to a temporary file that is synced, renamed
// over path, and then the directory is synced so the rename survives a
// crash.
func writeFileDurably(path string, data []byte) error {
	tmp := path + ".tmp" // one name: a crash leaves no litter that grows
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes the renames and creations in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
