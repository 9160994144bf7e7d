package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// An Overlay is a file system that reads through to a base it never
// changes: every change lands in memory, a file being copied there at its
// first change. Opening a log over an Overlay shows what its recovery
// would do (or fail on) without touching the log, at the cost in memory of
// only the files recovery changes.
//
// Its crash model is not MemFS's: every write counts as durable. It is
// for looking, not for crash tests.
type Overlay struct {
	base  FS
	upper *MemFS

	mu   sync.Mutex
	gone map[string]bool // base paths removed or renamed away; their children go with them
}

// NewOverlay returns an Overlay over base.
func NewOverlay(base FS) *Overlay {
	return &Overlay{base: base, upper: NewMem(), gone: make(map[string]bool)}
}

// inUpper reports whether name is in memory.
func (o *Overlay) inUpper(name string) bool {
	_, err := o.upper.Stat(name)
	return err == nil
}

// hidden reports whether the base's name was removed: it or a directory
// it is in. The caller holds o.mu.
func (o *Overlay) hidden(name string) bool {
	for p := filepath.Clean(name); ; p = filepath.Dir(p) {
		if o.gone[p] {
			return true
		}
		if d := filepath.Dir(p); d == p {
			return false
		}
	}
}

// inBase reports whether name is visible in the base. The caller holds
// o.mu.
func (o *Overlay) inBase(name string) (os.FileInfo, bool) {
	if o.hidden(name) {
		return nil, false
	}
	st, err := o.base.Stat(name)
	return st, err == nil
}

// copyUp brings the base's file name into memory, unless it is there. The
// caller holds o.mu.
func (o *Overlay) copyUp(name string) error {
	if o.inUpper(name) {
		return nil
	}
	var data []byte
	if st, ok := o.inBase(name); ok {
		if st.IsDir() {
			return o.upper.MkdirAll(name, 0o755)
		}
		var err error
		if data, err = ReadFile(o.base, name); err != nil {
			return err
		}
	}
	if err := o.upper.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := o.upper.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(data, 0)
	return err
}

func (o *Overlay) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	_, inBase := o.inBase(name)
	switch {
	case o.inUpper(name):
	case inBase && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case inBase && flag&os.O_TRUNC == 0:
		bf, err := o.base.OpenFile(name, os.O_RDONLY, 0)
		if err != nil {
			return nil, err
		}
		return &overlayFile{o: o, name: name, base: bf}, nil
	case inBase || flag&os.O_CREATE != 0:
		if err := o.upper.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return nil, err
		}
		flag |= os.O_CREATE
	default:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	uf, err := o.upper.OpenFile(name, flag&^os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	return &overlayFile{o: o, name: name, upper: uf}, nil
}

func (o *Overlay) OpenDir(name string) (File, error) {
	name = filepath.Clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if st, ok := o.inBase(name); !o.inUpper(name) && (!ok || !st.IsDir()) {
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if err := o.upper.MkdirAll(name, 0o755); err != nil {
		return nil, err
	}
	return o.upper.OpenDir(name)
}

func (o *Overlay) Remove(name string) error {
	name = filepath.Clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	_, inBase := o.inBase(name)
	if !o.inUpper(name) && !inBase {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if o.inUpper(name) {
		if err := o.upper.Remove(name); err != nil {
			return err
		}
	}
	if inBase {
		o.gone[name] = true
	}
	return nil
}

func (o *Overlay) RemoveAll(name string) error {
	name = filepath.Clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gone[name] = true
	return o.upper.RemoveAll(name)
}

// Rename moves a file, bringing it into memory first. Directories of the
// base cannot be renamed.
func (o *Overlay) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	o.mu.Lock()
	defer o.mu.Unlock()
	st, inBase := o.inBase(oldname)
	if inBase && st.IsDir() && !o.inUpper(oldname) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errors.New("an overlay does not rename directories of its base")}
	}
	if !inBase && !o.inUpper(oldname) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if err := o.copyUp(oldname); err != nil {
		return err
	}
	if err := o.upper.MkdirAll(filepath.Dir(newname), 0o755); err != nil {
		return err
	}
	if err := o.upper.Rename(oldname, newname); err != nil {
		return err
	}
	if inBase {
		o.gone[oldname] = true
	}
	return nil
}

func (o *Overlay) MkdirAll(name string, perm os.FileMode) error {
	return o.upper.MkdirAll(filepath.Clean(name), perm)
}

func (o *Overlay) ReadDir(name string) ([]string, error) {
	name = filepath.Clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	var names []string
	found := false
	if st, ok := o.inBase(name); ok && st.IsDir() {
		found = true
		base, err := o.base.ReadDir(name)
		if err != nil {
			return nil, err
		}
		for _, n := range base {
			if !o.gone[filepath.Join(name, n)] {
				names = append(names, n)
			}
		}
	}
	if upper, err := o.upper.ReadDir(name); err == nil {
		found = true
		names = append(names, upper...)
	}
	if !found {
		return nil, &os.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func (o *Overlay) Stat(name string) (os.FileInfo, error) {
	name = filepath.Clean(name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if st, err := o.upper.Stat(name); err == nil {
		return st, nil
	}
	if st, ok := o.inBase(name); ok {
		return st, nil
	}
	return nil, &os.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

// overlayFile reads its base file until the file is in memory (by this
// handle's change or another's), and the copy in memory after.
type overlayFile struct {
	o     *Overlay
	name  string
	base  File // nil for a file created in memory
	upper File // opened at the first access after the file is in memory
}

// current returns the file in memory, or nil while there is none.
func (f *overlayFile) current() (File, error) {
	if f.upper != nil {
		return f.upper, nil
	}
	f.o.mu.Lock()
	defer f.o.mu.Unlock()
	if !f.o.inUpper(f.name) {
		return nil, nil
	}
	u, err := f.o.upper.OpenFile(f.name, os.O_RDWR, 0)
	f.upper = u
	return u, err
}

// writable brings the file into memory and returns it there.
func (f *overlayFile) writable() (File, error) {
	f.o.mu.Lock()
	err := f.o.copyUp(f.name)
	f.o.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("overlay: bring %s into memory: %w", f.name, err)
	}
	return f.current()
}

func (f *overlayFile) Name() string { return f.name }

func (f *overlayFile) ReadAt(b []byte, off int64) (int, error) {
	u, err := f.current()
	if err != nil {
		return 0, err
	}
	if u != nil {
		return u.ReadAt(b, off)
	}
	return f.base.ReadAt(b, off)
}

func (f *overlayFile) WriteAt(b []byte, off int64) (int, error) {
	u, err := f.writable()
	if err != nil {
		return 0, err
	}
	return u.WriteAt(b, off)
}

func (f *overlayFile) Truncate(size int64) error {
	u, err := f.writable()
	if err != nil {
		return err
	}
	return u.Truncate(size)
}

func (f *overlayFile) Sync() error     { return nil }
func (f *overlayFile) SyncData() error { return nil }

func (f *overlayFile) Size() (int64, error) {
	u, err := f.current()
	if err != nil {
		return 0, err
	}
	if u != nil {
		return u.Size()
	}
	return f.base.Size()
}

func (f *overlayFile) Close() error {
	var errs []error
	if f.base != nil {
		errs = append(errs, f.base.Close())
	}
	if f.upper != nil {
		errs = append(errs, f.upper.Close())
	}
	return errors.Join(errs...)
}

var _ FS = (*Overlay)(nil)
