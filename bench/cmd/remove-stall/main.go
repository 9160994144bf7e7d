// Command remove-stall measures how removing large files delays the
// fdatasyncs of another file on the same disk: one goroutine appends 4 KiB
// to a file and fdatasyncs it in a loop (as the node's WAL does), while
// another creates 64 MiB files and removes them, either with one unlink or
// cut down step by step first (vfs.RemoveInSteps, as a log removes its
// deleted segments). On a file system mounted with discard, an unlink
// discards the whole file at once and the fdatasyncs queue behind it.
//
//	go run ./bench/cmd/remove-stall -dir /path/on/the/disk -mode unlink
//	go run ./bench/cmd/remove-stall -dir /path/on/the/disk -mode steps -step-mib 4
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"herald/bench/load"
	"herald/internal/vfs"
)

func main() {
	dir := flag.String("dir", ".", "directory on the disk to measure (a subdirectory is created and removed)")
	mode := flag.String("mode", "unlink", `"unlink" (one unlink per file) or "steps" (cut by -step, then unlink)`)
	stepMiB := flag.Int64("step-mib", 4, "how many MiB each cut removes, with -mode steps")
	files := flag.Int("files", 8, "how many 64 MiB files to remove")
	flag.Parse()
	if *stepMiB <= 0 {
		log.Fatalf("-step-mib %d: want a positive number of MiB", *stepMiB)
	}
	step := *stepMiB << 20
	if *mode != "unlink" && *mode != "steps" {
		log.Fatalf("-mode %q: want unlink or steps", *mode)
	}
	work, err := os.MkdirTemp(*dir, "remove-stall-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)

	var doomed []string
	for i := range *files {
		p := filepath.Join(work, fmt.Sprintf("seg%d", i))
		if err := writeSynced(p, 64<<20); err != nil {
			log.Fatal(err)
		}
		doomed = append(doomed, p)
	}
	removed := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		for _, p := range doomed {
			var err error
			if *mode == "unlink" {
				err = os.Remove(p)
			} else {
				err = vfs.RemoveInSteps(vfs.OS, p, step)
			}
			if err != nil {
				removed <- err
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		removed <- nil
	}()
	lat, err := syncUntil(filepath.Join(work, "wal"), removed)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d fdatasyncs, p50 %v p99 %v p99.9 %v max %v\n", *mode, lat.Count(),
		lat.Percentile(.5), lat.Percentile(.99), lat.Percentile(.999), lat.Max())
}

// writeSynced writes size bytes to a new file at path and fdatasyncs it.
func writeSynced(path string, size int) error {
	f, err := vfs.OS.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for off := 0; off < size; off += len(chunk) {
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.SyncData(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncUntil appends 4 KiB to path and fdatasyncs it until done reports,
// and returns the fdatasyncs' durations.
func syncUntil(path string, done <-chan error) (*load.Histogram, error) {
	f, err := vfs.OS.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	lat := new(load.Histogram)
	for off := int64(0); ; off += int64(len(buf)) {
		select {
		case err := <-done:
			return lat, err
		default:
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := f.SyncData(); err != nil {
			return nil, err
		}
		lat.Record(time.Since(start))
	}
}
