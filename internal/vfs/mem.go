package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory FS that remembers, for every file and directory,
// what a completed fsync has made durable. CrashClone returns the file
// system as a power loss at that moment could leave it; SetInjector makes
// operations fail as a full or failing disk would; FlipBit damages stored
// bytes as media rot does.
//
// Its model is strict: fsync of a file makes its data and length durable,
// not its name; fsync of a directory makes its entries (creations,
// renames, removals) durable, not the files' data.
type MemFS struct {
	mu     sync.Mutex
	root   *memNode
	inject func(Op) error
}

// OpKind names an operation for an injector.
type OpKind int

// The operations an injector sees.
const (
	OpRead OpKind = iota
	OpWrite
	OpTruncate
	OpSync
	OpCreate
	OpRemove
	OpRename
	OpMkdir
)

func (k OpKind) String() string {
	return [...]string{"read", "write", "truncate", "sync", "create", "remove", "rename", "mkdir"}[k]
}

// Op is an operation about to be carried out.
type Op struct {
	Kind OpKind
	Path string
}

type memNode struct {
	dir bool
	// A file's bytes, and what of them is durable.
	data, synced []byte
	// A directory's entries, and what of them is durable.
	children, syncedChildren map[string]*memNode
}

func newDir() *memNode {
	return &memNode{dir: true, children: map[string]*memNode{}, syncedChildren: map[string]*memNode{}}
}

// NewMem returns an empty MemFS.
func NewMem() *MemFS { return &MemFS{root: newDir()} }

// SetInjector installs fn, called before every operation: a non-nil error
// fails the operation with nothing changed. nil removes the injector.
func (m *MemFS) SetInjector(fn func(Op) error) {
	m.mu.Lock()
	m.inject = fn
	m.mu.Unlock()
}

// ErrInjected wraps every error an injector returns through ENOSPC or EIO
// helpers, so tests can tell injected failures from real ones.
var ErrInjected = errors.New("injected fault")

// InjectedError returns an error for op like the kernel's: errno wrapped in
// an *os.PathError, and ErrInjected.
func InjectedError(op Op, errno syscall.Errno) error {
	return &os.PathError{Op: op.Kind.String(), Path: op.Path, Err: errors.Join(errno, ErrInjected)}
}

// check runs the injector; the caller holds mu.
func (m *MemFS) check(kind OpKind, path string) error {
	if m.inject == nil {
		return nil
	}
	return m.inject(Op{Kind: kind, Path: path})
}

// CrashClone returns the file system as a power loss now would leave it.
// With a nil tear, exactly what was synced survives. With a tear, each file
// that has unsynced changes keeps either its synced or its current length,
// and each 512-byte sector of it independently holds its synced or its
// current bytes (zeros where neither had any): the torn writes a real
// disk can leave. Directory entries are those last synced.
func (m *MemFS) CrashClone(tear *rand.Rand) *MemFS {
	return m.clone(func(n *memNode) []byte {
		if tear != nil && !slices.Equal(n.data, n.synced) {
			return tearFile(n.synced, n.data, tear)
		}
		return slices.Clone(n.synced)
	}, true)
}

// Clone returns a copy of the file system as it is now, synced or not: the
// state a process crash leaves, since the kernel keeps what was written.
// The copy's durable state starts as its current one.
func (m *MemFS) Clone() *MemFS {
	return m.clone(func(n *memNode) []byte { return slices.Clone(n.data) }, false)
}

// clone copies the tree, giving each file the contents data picks, as
// both its current and its durable bytes. With synced, only directory
// entries that were synced are copied.
func (m *MemFS) clone(data func(*memNode) []byte, synced bool) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	var walk func(n *memNode) *memNode
	walk = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		if !n.dir {
			b := data(n)
			c := &memNode{data: b, synced: slices.Clone(b)}
			seen[n] = c
			return c
		}
		c := newDir()
		seen[n] = c
		entries := n.children
		if synced {
			entries = n.syncedChildren
		}
		for name, child := range entries {
			c.children[name] = walk(child)
			c.syncedChildren[name] = c.children[name]
		}
		return c
	}
	return &MemFS{root: walk(m.root)}
}

// tearFile mixes the synced and current contents of a file sector by
// sector.
func tearFile(synced, current []byte, rng *rand.Rand) []byte {
	const sector = 512
	size := len(synced)
	if rng.IntN(2) == 0 {
		size = len(current)
	}
	out := make([]byte, size)
	for off := 0; off < size; off += sector {
		src := synced
		if rng.IntN(2) == 0 {
			src = current
		}
		if off < len(src) {
			copy(out[off:min(off+sector, size)], src[off:min(off+sector, len(src))])
		}
	}
	return out
}

// FlipBit inverts bit (counted from the start of the file) of name, in its
// current and its synced contents alike.
func (m *MemFS) FlipBit(name string, bit int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err != nil {
		return err
	}
	if n.dir || bit < 0 || bit/8 >= int64(len(n.data)) {
		return fmt.Errorf("flip bit %d of %s: out of range", bit, name)
	}
	n.data[bit/8] ^= 1 << (bit % 8)
	if bit/8 < int64(len(n.synced)) {
		n.synced[bit/8] ^= 1 << (bit % 8)
	}
	return nil
}

// Files lists every file below dir with its size.
func (m *MemFS) Files(dir string) (map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var walk func(n *memNode, path string)
	walk = func(n *memNode, path string) {
		for name, c := range n.children {
			p := filepath.Join(path, name)
			if c.dir {
				walk(c, p)
			} else {
				out[p] = int64(len(c.data))
			}
		}
	}
	walk(n, dir)
	return out, nil
}

func splitPath(name string) []string {
	name = strings.Trim(filepath.ToSlash(filepath.Clean(name)), "/")
	if name == "" || name == "." {
		return nil
	}
	return strings.Split(name, "/")
}

// lookup finds name; the caller holds mu.
func (m *MemFS) lookup(name string) (*memNode, error) {
	n := m.root
	for _, part := range splitPath(name) {
		if !n.dir {
			return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOTDIR}
		}
		c, ok := n.children[part]
		if !ok {
			return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		n = c
	}
	return n, nil
}

// parent finds the directory holding name and name's last element; the
// caller holds mu.
func (m *MemFS) parent(name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	dir, err := m.lookupDir(strings.Join(parts[:len(parts)-1], "/"), "open")
	if err != nil {
		return nil, "", err
	}
	return dir, parts[len(parts)-1], nil
}

// lookupDir finds the directory name, failing op with ENOTDIR if name is
// a file; the caller holds mu.
func (m *MemFS) lookupDir(name, op string) (*memNode, error) {
	n, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return n, nil
}

func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent(name)
	if err != nil {
		return nil, err
	}
	n, ok := dir.children[base]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case ok && n.dir:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case !ok:
		if err := m.check(OpCreate, name); err != nil {
			return nil, err
		}
		n = &memNode{}
		dir.children[base] = n
	case flag&os.O_TRUNC != 0:
		if err := m.check(OpTruncate, name); err != nil {
			return nil, err
		}
		n.data = n.data[:0]
	}
	writable := flag&(os.O_RDWR|os.O_WRONLY) != 0
	return &memFile{fs: m, n: n, name: name, writable: writable}, nil
}

func (m *MemFS) OpenDir(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupDir(name, "open")
	if err != nil {
		return nil, err
	}
	return &memFile{fs: m, n: n, name: name}, nil
}

func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent(name)
	if err != nil {
		return err
	}
	n, ok := dir.children[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir && len(n.children) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	if err := m.check(OpRemove, name); err != nil {
		return err
	}
	delete(dir.children, base)
	return nil
}

func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parent(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := dir.children[base]; !ok {
		return nil
	}
	if err := m.check(OpRemove, name); err != nil {
		return err
	}
	delete(dir.children, base)
	return nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	odir, obase, err := m.parent(oldname)
	if err != nil {
		return err
	}
	n, ok := odir.children[obase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	ndir, nbase, err := m.parent(newname)
	if err != nil {
		return err
	}
	if err := m.check(OpRename, newname); err != nil {
		return err
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	return nil
}

func (m *MemFS) MkdirAll(name string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, part := range splitPath(name) {
		c, ok := n.children[part]
		if !ok {
			if err := m.check(OpMkdir, name); err != nil {
				return err
			}
			c = newDir()
			n.children[part] = c
		}
		if !c.dir {
			return &os.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
		}
		n = c
	}
	return nil
}

func (m *MemFS) ReadDir(name string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupDir(name, "readdir")
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	return memInfo{name: filepath.Base(name), size: int64(len(n.data)), dir: n.dir}, nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}

type memFile struct {
	fs       *MemFS
	n        *memNode
	name     string
	writable bool
	closed   bool
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) usable(op string) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	return nil
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usable("read"); err != nil {
		return 0, err
	}
	if err := f.fs.check(OpRead, f.name); err != nil {
		return 0, err
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usable("write"); err != nil {
		return 0, err
	}
	if !f.writable {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.EBADF}
	}
	if err := f.fs.check(OpWrite, f.name); err != nil {
		return 0, err
	}
	if end := off + int64(len(b)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], b)
	return len(b), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usable("truncate"); err != nil {
		return err
	}
	if err := f.fs.check(OpTruncate, f.name); err != nil {
		return err
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usable("sync"); err != nil {
		return err
	}
	if err := f.fs.check(OpSync, f.name); err != nil {
		return err
	}
	if f.n.dir {
		clear(f.n.syncedChildren)
		for name, c := range f.n.children {
			f.n.syncedChildren[name] = c
		}
		return nil
	}
	f.n.synced = append(f.n.synced[:0], f.n.data...)
	return nil
}

func (f *memFile) SyncData() error { return f.Sync() }

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usable("stat"); err != nil {
		return 0, err
	}
	return int64(len(f.n.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.usable("close"); err != nil {
		return err
	}
	f.closed = true
	return nil
}
