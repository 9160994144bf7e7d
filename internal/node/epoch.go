package node

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"

	"herald/internal/vfs"
)

// bootEpochFile, in the data directory, holds the node's boot epoch: the
// number of times the node has started on that directory. The ids of
// non-persistent events carry it (topic.NonPersistentEventID) ahead of a
// counter that starts again from 1 at every start, so that no id is handed
// out twice. The name has a dot, so no topic or group can clash with it.
const bootEpochFile = "boot.epoch"

// bootEpochMagic starts the framed epoch file (vfs.Frame): a flipped bit
// anywhere in it is detected rather than read as another epoch, which
// could be one ids were already made with.
const bootEpochMagic = "HBEP"

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
	data := vfs.Frame(bootEpochMagic, strconv.AppendUint(nil, epoch, 10))
	if err := vfs.WriteFileAtomic(vfs.OS, dir, bootEpochFile, data); err != nil {
		return 0, fmt.Errorf("store the boot epoch: %w; check that the data directory is writable and its disk is not full", err)
	}
	return epoch, nil
}

// readBootEpoch returns the epoch stored at path, 0 if there is none yet.
func readBootEpoch(path string) (uint64, error) {
	data, err := vfs.ReadFramed(vfs.OS, path, bootEpochMagic)
	var damaged *vfs.DamagedError
	if errors.As(err, &damaged) {
		return 0, bootEpochDamaged(path, damaged.Error())
	}
	if err != nil {
		return 0, err // names the file
	}
	if data == nil {
		return 0, nil
	}
	epoch, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil || epoch == 0 {
		return 0, bootEpochDamaged(path, fmt.Sprintf("it holds %.32q, not a positive number", data))
	}
	return epoch, nil
}

// bootEpochDamaged says what to do with a damaged epoch file. The file is
// replaced atomically, so damage is never a torn write, and starting again
// from 1 on our own would hand out ids used before.
func bootEpochDamaged(path, reason string) error {
	return fmt.Errorf("boot epoch file %s is damaged (%s); herald will not guess the epoch: delete the file to start again from epoch 1, accepting that non-persistent event ids (topic/shard/npE.N) may repeat ones handed out before", path, reason)
}
