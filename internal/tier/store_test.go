package tier

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func openMem(t *testing.T) *Store {
	t.Helper()
	s, err := OpenStore(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exerciseStore runs a store through Put, ReadRange, List and Delete.
func exerciseStore(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	data := []byte("0123456789abcdef")
	for _, name := range []string{"tier/a", "tier/b", "other/c"} {
		if err := s.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ReadRange(ctx, "tier/a", 3, 5)
	if err != nil || string(got) != "34567" {
		t.Fatalf("ReadRange(3, 5) = %q, %v", got, err)
	}
	got, err = s.ReadRange(ctx, "tier/a", 0, int64(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadRange of the whole object = %q, %v", got, err)
	}
	if got, err := s.ReadRange(ctx, "tier/a", 10, 10); err == nil {
		t.Fatalf("ReadRange beyond the end returned %q", got)
	}
	if _, err := s.ReadRange(ctx, "tier/missing", 0, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadRange of a missing object: %v, want ErrNotFound", err)
	}
	list, err := s.List(ctx, "tier/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "tier/a" || list[1].Name != "tier/b" || list[0].Size != int64(len(data)) || list[0].ModTime.IsZero() {
		t.Fatalf("List(tier/) = %+v", list)
	}
	if err := s.Delete(ctx, "tier/a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "tier/a"); err != nil {
		t.Fatalf("deleting a deleted object: %v", err)
	}
	if _, err := s.ReadRange(ctx, "tier/a", 0, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadRange of a deleted object: %v, want ErrNotFound", err)
	}
	if list, err := s.List(ctx, ProbePrefix); err != nil || len(list) != 0 {
		t.Fatalf("the probe left %+v (%v)", list, err)
	}
}

func TestMemStore(t *testing.T) { exerciseStore(t, openMem(t)) }

func TestFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	u := url.URL{Scheme: "file", Path: dir}
	s, err := OpenStore(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("OpenStore did not create the directory: %v", err)
	}
	exerciseStore(t, s)
}

func TestOpenStoreErrors(t *testing.T) {
	ctx := context.Background()
	// A directory that cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"nosuch://x", "file://" + file + "/dir", "%zz"} {
		if s, err := OpenStore(ctx, raw); err == nil {
			s.Close()
			t.Errorf("OpenStore(%q) succeeded", raw)
		} else if !strings.Contains(err.Error(), "tier store") {
			t.Errorf("OpenStore(%q): %v does not say what failed", raw, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"s3://b?region=r":                    "s3://b?region=r",
		"s3://user:hunter2@b?region=r":       "s3://user:xxxxx@b?region=r",
		"s3://b?region=r&secret_key=hunter2": "s3://b?region=r&secret_key=xxxxx",
		"s3://b?session_token=hunter2":       "s3://b?session_token=xxxxx",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := redact(u); got != want {
			t.Errorf("redact(%s) = %s, want %s", raw, got, want)
		}
	}
	_, err := OpenStore(context.Background(), "nosuch://user:hunter2@b?token=hunter2")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenStore's error shows the secret: %v", err)
	}
}
