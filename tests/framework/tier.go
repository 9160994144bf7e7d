package framework

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/testkit/heraldproc"
	"herald/internal/tier"
)

// TierBucket is a bucket of a moto S3 server that herald serve tiers to
// (--tier-url), and that a test looks into as any S3 client would.
type TierBucket struct {
	// URL is the bucket as --tier-url takes it.
	URL   string
	store *tier.Store
}

// NewTierBucket creates bucket on the moto server at endpoint
// (testkit.StartMoto) and returns it. It sets the AWS credentials in the
// environment of the test, which the servers it starts inherit: moto
// takes any, but the S3 client wants some. Nothing else may be looked
// up: no shared config or credentials file, and no EC2 instance metadata
// service, whose address is not loopback.
func NewTierBucket(t *testing.T, endpoint, bucket string) *TierBucket {
	t.Helper()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "herald-test", "AWS_SECRET_ACCESS_KEY": "herald-test",
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_CONFIG_FILE": "/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	testkit.CreateBucket(t, endpoint, bucket)
	u := fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1&use_path_style=true", bucket, url.QueryEscape(endpoint))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := tier.OpenStore(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &TierBucket{URL: u, store: s}
}

// TierObject is an object of a TierBucket, with the runs its footer
// lists.
type TierObject struct {
	Name string
	Size int64
	Runs []tier.Run
}

// Objects lists herald's objects in the bucket, in name order, each
// with the runs its footer lists; an object that is not a whole tier
// object fails the test. An object the reconciler deletes between the
// listing and its read is left out: it is no longer in the bucket.
func (b *TierBucket) Objects(t testing.TB) []TierObject {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	infos, err := b.store.List(ctx, "herald/")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]TierObject, 0, len(infos))
	for _, o := range infos {
		data, err := b.store.ReadRange(ctx, o.Name, 0, o.Size)
		if errors.Is(err, tier.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		runs, err := tier.DecodeFooter(o.Name, data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, TierObject{Name: o.Name, Size: o.Size, Runs: runs})
	}
	return out
}

// Damage flips one bit in each run of object name, as a store that
// returns damaged data would.
func (b *TierBucket) Damage(t testing.TB, o TierObject) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data, err := b.store.ReadRange(ctx, o.Name, 0, o.Size)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range o.Runs {
		data[r.Offset+r.Length/2] ^= 0x10
	}
	if err := b.store.Put(ctx, o.Name, data); err != nil {
		t.Fatal(err)
	}
}

// Delete deletes object name from the bucket.
func (b *TierBucket) Delete(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.store.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// LaunchServer starts herald serve on dataDir and addr with env added to
// its environment and extra flags, and returns without waiting for it:
// a server told to kill itself (serve's HERALD_TEST_TIER_CRASH_AFTER)
// may do so before it is ready. The server is killed when the test ends.
func LaunchServer(t *testing.T, env []string, dataDir, addr string, extra ...string) *heraldproc.Server {
	t.Helper()
	args := append([]string{"--push-allow", "127.0.0.0/8,::1"}, extra...)
	s, err := heraldproc.Launch(heraldproc.Config{
		Binary:  Binary(),
		DataDir: dataDir,
		Listen:  addr,
		Args:    args,
		Env:     env,
		Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}
