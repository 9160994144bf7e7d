package vfs

import (
	"os"
	"slices"
	"testing"
)

// TestOverlayLeavesItsBaseAlone changes, creates, renames and removes
// files over an Overlay: the overlay shows every change, and the base
// none.
func TestOverlayLeavesItsBaseAlone(t *testing.T) {
	base := NewMem()
	write := func(fsys FS, name, data string) {
		t.Helper()
		f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte(data), 0); err != nil {
			t.Fatal(err)
		}
	}
	read := func(fsys FS, name string) string {
		t.Helper()
		b, err := ReadFile(fsys, name)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return string(b)
	}
	base.MkdirAll("/d/sub", 0o755)
	write(base, "/d/a", "aaaa")
	write(base, "/d/b", "bbbb")
	write(base, "/d/sub/c", "cccc")
	before := map[string]string{"/d/a": "aaaa", "/d/b": "bbbb", "/d/sub/c": "cccc"}

	o := NewOverlay(base)
	// A handle opened before another changes the file sees the change.
	early, err := o.OpenFile("/d/a", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	write(o, "/d/a", "AA")
	if got := read(o, "/d/a"); got != "AAaa" {
		t.Fatalf("changed file reads %q", got)
	}
	buf := make([]byte, 4)
	if _, err := early.ReadAt(buf, 0); err != nil || string(buf) != "AAaa" {
		t.Fatalf("an earlier handle reads %q, %v", buf, err)
	}
	if err := early.Truncate(1); err != nil {
		t.Fatal(err)
	}
	if got := read(o, "/d/a"); got != "A" {
		t.Fatalf("truncated file reads %q", got)
	}
	write(o, "/d/new", "nnnn")
	if err := o.Rename("/d/b", "/d/sub/b2"); err != nil {
		t.Fatal(err)
	}
	if err := o.Remove("/d/sub/c"); err != nil {
		t.Fatal(err)
	}
	if names, _ := o.ReadDir("/d"); !slices.Equal(names, []string{"a", "new", "sub"}) {
		t.Fatalf("overlay lists %v", names)
	}
	if names, _ := o.ReadDir("/d/sub"); !slices.Equal(names, []string{"b2"}) {
		t.Fatalf("overlay lists %v in sub", names)
	}
	if got := read(o, "/d/sub/b2"); got != "bbbb" {
		t.Fatalf("renamed file reads %q", got)
	}
	for _, gone := range []string{"/d/b", "/d/sub/c"} {
		if _, err := o.Stat(gone); err == nil {
			t.Fatalf("%s is still in the overlay", gone)
		}
	}
	if err := o.RemoveAll("/d/sub"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Stat("/d/sub/b2"); err == nil {
		t.Fatal("a file of a removed directory is still in the overlay")
	}

	for name, want := range before {
		if got := read(base, name); got != want {
			t.Fatalf("the base's %s became %q", name, got)
		}
	}
	if names, _ := base.ReadDir("/d"); !slices.Equal(names, []string{"a", "b", "sub"}) {
		t.Fatalf("the base lists %v", names)
	}
}
