package tier

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/testkit/faultproxy"
)

// s3Env gives the AWS SDK dummy credentials and a region, and keeps it
// from the machine's configuration and instance metadata.
func s3Env(t *testing.T) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "herald-test", "AWS_SECRET_ACCESS_KEY": "herald-test-secret",
		"AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_PROFILE": "", "AWS_SESSION_TOKEN": "",
	} {
		t.Setenv(k, v)
	}
}

// s3URL is the store URL of bucket at an S3-compatible endpoint.
func s3URL(bucket, endpoint string) string {
	q := url.Values{"endpoint": {endpoint}, "region": {"us-east-1"}, "use_path_style": {"true"}}
	return "s3://" + bucket + "?" + q.Encode()
}

func TestS3Store(t *testing.T) {
	endpoint := testkit.StartMoto(t)
	s3Env(t)
	testkit.CreateBucket(t, endpoint, "herald-tier")
	ctx := context.Background()
	s, err := OpenStore(ctx, s3URL("herald-tier", endpoint))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exerciseStore(t, s)

	// Objects built, uploaded and read back, through a Reader.
	r := NewReader(s, 1<<20)
	defer r.Close()
	objects := map[string]builtObject{}
	for i, name := range []string{"tier/node-1/000001", "tier/node-1/000002"} {
		objects[name] = putObject(t, s, name, uint64(10+i), 12)
	}
	for name, o := range objects {
		for _, run := range o.runs {
			r.Prefetch(name, run)
		}
	}
	for name, o := range objects {
		for i, run := range o.runs {
			got, err := r.Read(ctx, name, run)
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, name+" "+run.String(), got, o.entries[i])
		}
		whole, err := s.ReadRange(ctx, name, 0, int64(len(o.data)))
		if err != nil {
			t.Fatal(err)
		}
		runs, err := DecodeFooter(name, whole)
		if err != nil || len(runs) != len(o.runs) {
			t.Fatalf("footer of %s: %d runs, %v", name, len(runs), err)
		}
	}
	list, err := s.List(ctx, "tier/node-1/")
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

func TestS3OpenStoreErrors(t *testing.T) {
	endpoint := testkit.StartMoto(t)
	s3Env(t)
	ctx := context.Background()

	// Moto takes any credentials, so a missing bucket is what it can
	// refuse.
	raw := s3URL("no-such-bucket", endpoint)
	_, err := OpenStore(ctx, raw)
	if err == nil {
		t.Fatal("OpenStore of a missing bucket succeeded")
	}
	wantOpenError(t, err, raw, "bucket")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("missing bucket: %v does not wrap ErrNotFound", err)
	}

	// An endpoint nobody listens on.
	raw = s3URL("herald-tier", "http://"+testkit.FreeAddr(t))
	_, err = OpenStore(ctx, raw)
	if err == nil {
		t.Fatal("OpenStore of an endpoint nobody listens on succeeded")
	}
	wantOpenError(t, err, raw, "endpoint")
}

// wantOpenError checks that OpenStore's error names the store and says
// what to check.
func wantOpenError(t *testing.T, err error, raw, check string) {
	t.Helper()
	msg := err.Error()
	if !strings.Contains(msg, raw) || !strings.Contains(msg, "check") || !strings.Contains(msg, check) {
		t.Errorf("OpenStore(%s): %q does not name the URL and say to check the %s", raw, msg, check)
	}
	t.Logf("OpenStore(%s): %v", raw, err)
}

// A store that stops answering: prefetches beyond the limit are dropped,
// reads give up with their context, a fetch nobody waits for any more is
// forgotten, and Close cancels the fetches and returns.
func TestS3ReaderHungStore(t *testing.T) {
	endpoint := testkit.StartMoto(t)
	s3Env(t)
	testkit.CreateBucket(t, endpoint, "herald-tier")
	proxy, err := faultproxy.Listen(testkit.FreeAddr(t), strings.TrimPrefix(endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx := context.Background()
	s, err := OpenStore(ctx, s3URL("herald-tier", "http://"+proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := putObject(t, s, "tier/o1", 20, MaxPrefetches+4)

	proxy.Blackhole()
	r := NewReader(s, 1<<20)
	for _, run := range o.runs[:MaxPrefetches+2] {
		r.Prefetch("tier/o1", run)
	}
	if st := r.Stats(); st.Prefetches != MaxPrefetches || st.PrefetchDrops != 2 {
		t.Fatalf("stats %+v: want %d prefetches running and 2 dropped", st, MaxPrefetches)
	}
	for _, run := range []Run{o.runs[0], o.runs[len(o.runs)-1]} { // prefetching, and not
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := r.Read(rctx, "tier/o1", run)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read from a hung store: %v, want the context's deadline", err)
		}
	}
	r.mu.Lock()
	flights := len(r.flights)
	r.mu.Unlock()
	if flights != MaxPrefetches {
		t.Fatalf("%d fetches in flight, want only the %d prefetches", flights, MaxPrefetches)
	}
	start := time.Now()
	r.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with hung fetches", d)
	}

	proxy.Heal()
	r = NewReader(s, 1<<20)
	defer r.Close()
	got, err := r.Read(ctx, "tier/o1", o.runs[0])
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "after healing", got, o.entries[0])
}
