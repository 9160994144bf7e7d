package tier

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file://
	_ "gocloud.dev/blob/memblob"  // mem://
	_ "gocloud.dev/blob/s3blob"   // s3://
	"gocloud.dev/gcerrors"
)

// ErrNotFound is wrapped by the errors of reads of an object the store
// does not have.
var ErrNotFound = errors.New("object not found")

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// Store is a bucket of tier objects. Its methods are safe for concurrent
// use.
type Store struct {
	bucket *blob.Bucket
	url    string // redacted
}

// ProbePrefix is where OpenStore writes its probe objects; a sweeper of
// orphan objects leaves it alone.
const ProbePrefix = "_probe/"

// probeTimeout bounds OpenStore's probe when ctx has no earlier
// deadline: an endpoint that accepts connections and never answers must
// not hang a node's start.
const probeTimeout = 30 * time.Second

// OpenStore opens the bucket at rawURL (see the package comment for the
// forms) and checks at once that it can write, read and delete there.
func OpenStore(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse quotes the whole URL, which may hold a password.
		return nil, fmt.Errorf("tier store: the URL does not parse: %w", errors.Unwrap(err))
	}
	redacted := redact(u)
	if u.Scheme == "file" {
		// Create the directory if missing, and write no attribute sidecar
		// files: objects carry no metadata.
		q := u.Query()
		if !q.Has("create_dir") {
			q.Set("create_dir", "true")
		}
		if !q.Has("metadata") {
			q.Set("metadata", "skip")
		}
		u.RawQuery = q.Encode()
	}
	opened := u.String()
	bucket, err := blob.OpenBucket(ctx, opened)
	if err != nil {
		// The driver's message quotes the URL it was given.
		return nil, fmt.Errorf("tier store %s: open: %w (the schemes are mem://, file:///DIR and s3://BUCKET?region=...)", redacted, scrub(err, opened, redacted))
	}
	s := &Store{bucket: bucket, url: redacted}
	if err := s.probe(ctx); err != nil {
		bucket.Close()
		return nil, err
	}
	return s, nil
}

// probe writes, reads back and deletes a small object. Its errors name
// the store once, and say what to check.
func (s *Store) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var id [8]byte
	rand.Read(id[:])
	name := ProbePrefix + hex.EncodeToString(id[:])
	want := []byte("herald tier store probe " + name)
	if err := s.put(ctx, name, want); err != nil {
		return fmt.Errorf("tier store %s: cannot write the probe object %s; %s: %w", s.url, name, advice(err), err)
	}
	got, err := s.readRange(ctx, name, 0, int64(len(want)))
	if err != nil {
		return fmt.Errorf("tier store %s: wrote the probe object %s but cannot read it back; %s: %w", s.url, name, advice(err), err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("tier store %s: the probe object %s reads back as %q, written as %q: the store does not return what it was given", s.url, name, got, want)
	}
	if err := s.delete(ctx, name); err != nil {
		return fmt.Errorf("tier store %s: cannot delete the probe object %s (the sweeper of orphan objects must delete); %s: %w", s.url, name, advice(err), err)
	}
	return nil
}

// advice says what to check after a failed probe.
func advice(err error) string {
	var netErr *net.OpError
	switch {
	case errors.As(err, &netErr):
		return "cannot reach the store: check the endpoint (scheme, host and port) and that its server runs"
	case errors.Is(err, context.DeadlineExceeded):
		return "the store did not answer in time: check the endpoint and the network"
	case gcerrors.Code(err) == gcerrors.NotFound:
		return "check that the bucket (or directory) exists"
	case gcerrors.Code(err) == gcerrors.PermissionDenied:
		return "check the credentials and their permissions on the bucket"
	default:
		return "check the credentials, that the bucket exists, and the endpoint and region"
	}
}

// URL returns the store's URL without credentials, for messages.
func (s *Store) URL() string { return s.url }

// Put writes data as object name, replacing any object of that name.
func (s *Store) Put(ctx context.Context, name string, data []byte) error {
	if err := s.put(ctx, name, data); err != nil {
		return fmt.Errorf("tier store %s: put %s (%d bytes): %w", s.url, name, len(data), err)
	}
	return nil
}

func (s *Store) put(ctx context.Context, name string, data []byte) error {
	sum := md5.Sum(data) // the store checks what it received against it
	err := s.bucket.WriteAll(ctx, name, data, &blob.WriterOptions{
		ContentType: "application/octet-stream",
		ContentMD5:  sum[:],
	})
	return s.wrap(err)
}

// ReadRange reads length bytes of object name from offset off: all of
// them, or an error. A missing object gives an error wrapping ErrNotFound.
func (s *Store) ReadRange(ctx context.Context, name string, off, length int64) ([]byte, error) {
	data, err := s.readRange(ctx, name, off, length)
	if err != nil {
		return nil, fmt.Errorf("tier store %s: read %s bytes %d+%d: %w", s.url, name, off, length, err)
	}
	return data, nil
}

func (s *Store) readRange(ctx context.Context, name string, off, length int64) ([]byte, error) {
	if off < 0 || length < 0 {
		return nil, errors.New("invalid range")
	}
	r, err := s.bucket.NewRangeReader(ctx, name, off, length, nil)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer r.Close()
	if size := r.Size(); off+length > size {
		return nil, fmt.Errorf("the object has only %d bytes", size)
	}
	buf := make([]byte, length)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, s.wrap(err)
	}
	return buf, nil
}

// List returns the objects whose names start with prefix, in name order.
func (s *Store) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tier store %s: list %q: %w", s.url, prefix, s.wrap(err))
		}
		if !obj.IsDir {
			out = append(out, ObjectInfo{Name: obj.Key, Size: obj.Size, ModTime: obj.ModTime})
		}
	}
}

// Delete deletes object name. Deleting a missing object succeeds, so that
// a retried sweep does not fail.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.delete(ctx, name); err != nil {
		return fmt.Errorf("tier store %s: delete %s: %w", s.url, name, err)
	}
	return nil
}

func (s *Store) delete(ctx context.Context, name string) error {
	err := s.bucket.Delete(ctx, name)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return err
	}
	return nil
}

// Close releases the bucket.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("tier store %s: close: %w", s.url, err)
	}
	return nil
}

// wrap adds ErrNotFound to the errors of missing objects (or buckets),
// keeping the driver's error for errors.As.
func (s *Store) wrap(err error) error {
	if err != nil && gcerrors.Code(err) == gcerrors.NotFound {
		return notFoundError{err}
	}
	return err
}

// notFoundError is an error of the store that means ErrNotFound.
type notFoundError struct{ err error }

func (e notFoundError) Error() string   { return e.err.Error() }
func (e notFoundError) Unwrap() []error { return []error{ErrNotFound, e.err} }

// secretParams are query parameters whose values redact hides: s3blob
// takes no credentials in the URL, but a hand-written URL may carry some.
var secretParams = []string{"secret", "token", "password", "signature", "credential", "key"}

// redact returns u without its password and with the values of
// credential-like query parameters replaced.
func redact(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User(c.User.Username())
		if _, ok := u.User.Password(); ok {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	q := c.Query()
	changed := false
	for k := range q {
		lk := strings.ToLower(k)
		for _, s := range secretParams {
			if strings.Contains(lk, s) {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
	}
	if changed {
		c.RawQuery = q.Encode()
	}
	return c.String()
}

// scrub replaces the raw URL in a driver's message with the redacted one.
func scrub(err error, raw, redacted string) error {
	if raw == redacted || !strings.Contains(err.Error(), raw) {
		return err
	}
	return scrubbed{msg: strings.ReplaceAll(err.Error(), raw, redacted), err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e scrubbed) Error() string { return e.msg }
func (e scrubbed) Unwrap() error { return e.err }
