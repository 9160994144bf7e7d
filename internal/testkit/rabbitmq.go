package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ is a private RabbitMQ node run from the Debian package's
// scripts: its own node name, epmd, ports, data, logs, configuration and
// Erlang cookie, all under a temporary directory, so that it neither uses
// nor disturbs a system RabbitMQ. It listens for AMQP on loopback, and for
// AMQP over TLS with a certificate of CAFile for 127.0.0.1.
type RabbitMQ struct {
	dir      string
	node     string
	port     int // AMQP
	tlsPort  int // AMQP over TLS
	distPort int // Erlang distribution
	epmdPort int
	certs    Certificates
	epmd     *process
	broker   *process
}

// rabbitmqServer is the script that runs the broker in the foreground.
// Not /usr/sbin/rabbitmq-server: as root, that one switches to the
// rabbitmq user, who cannot write the test's directory.
const rabbitmqServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// rabbitmqStartTimeout bounds the broker's boot, usually 5 to 15 seconds.
const rabbitmqStartTimeout = 90 * time.Second

// StartRabbitMQ starts a RabbitMQ node and removes it when the test ends;
// under -short it skips the test instead.
func StartRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a RabbitMQ node; the fast tier (-short) starts no external program")
	}
	b, err := NewRabbitMQ()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	return b
}

// NewRabbitMQ prepares a node's directory; Start runs it, Close removes
// it. For a TestMain that shares one node among tests.
func NewRabbitMQ() (_ *RabbitMQ, err error) {
	if _, err := os.Stat(rabbitmqServer); err != nil {
		return nil, fmt.Errorf("RabbitMQ is not installed (%v): run scripts/install-test-deps.sh (Debian package rabbitmq-server; make test runs the script)", err)
	}
	dir, err := os.MkdirTemp("", "herald-rabbitmq-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	b := &RabbitMQ{dir: dir}
	for _, p := range []*int{&b.port, &b.tlsPort, &b.distPort, &b.epmdPort} {
		if *p, err = freePort(); err != nil {
			return nil, err
		}
	}
	b.node = fmt.Sprintf("herald-test-%d@localhost", b.port)
	if b.certs, err = WriteCertificates(dir); err != nil {
		return nil, err
	}
	files := map[string]string{
		"rabbitmq.conf": fmt.Sprintf(`# A low disk limit: a nearly full CI disk must not block publishers.
disk_free_limit.absolute = 1MB
listeners.tcp.1 = 127.0.0.1:%d
listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
`, b.port, b.tlsPort, b.certs.CAFile, b.certs.CertFile, b.certs.KeyFile),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "", // instead of /etc/rabbitmq/rabbitmq-env.conf
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return b, os.Mkdir(filepath.Join(dir, "home"), 0o700)
}

// URL is the AMQP URL of the default virtual host, as guest.
func (b *RabbitMQ) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", b.port) }

// TLSURL is URL over TLS.
func (b *RabbitMQ) TLSURL() string {
	return fmt.Sprintf("amqps://guest:guest@127.0.0.1:%d/", b.tlsPort)
}

// CAFile is the CA that signed the TLS listener's certificate.
func (b *RabbitMQ) CAFile() string { return b.certs.CAFile }

func (b *RabbitMQ) env() []string {
	return append(os.Environ(),
		"HOME="+filepath.Join(b.dir, "home"), // the Erlang cookie
		"ERL_EPMD_PORT="+strconv.Itoa(b.epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME="+b.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(b.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(b.distPort),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(b.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(b.dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(b.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(b.dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(b.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(b.dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(b.dir, "rabbitmq.pid"),
	)
}

// Start runs the node (again, after Stop: same ports, same data) and
// waits until it accepts connections on both listeners.
func (b *RabbitMQ) Start() error {
	if b.epmd == nil {
		epmd, err := exec.LookPath("epmd")
		if err != nil {
			return fmt.Errorf("no epmd (it comes with RabbitMQ's Erlang): install RabbitMQ with scripts/install-test-deps.sh: %w", err)
		}
		cmd := exec.Command(epmd, "-address", "127.0.0.1", "-port", strconv.Itoa(b.epmdPort))
		if b.epmd, err = startProcess("epmd", cmd, filepath.Join(b.dir, "epmd.log")); err != nil {
			return err
		}
	}
	cmd := exec.Command(rabbitmqServer)
	cmd.Dir, cmd.Env = b.dir, b.env()
	p, err := startProcess("rabbitmq-server", cmd, filepath.Join(b.dir, "stdout.log"))
	if err != nil {
		return err
	}
	b.broker = p
	return p.waitReady(rabbitmqStartTimeout, b.ready)
}

// ready reports whether the node accepts connections on both listeners.
func (b *RabbitMQ) ready() error {
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		return err
	}
	conn.Close()
	// The TLS listener starts after the plain one.
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.tlsPort)))
	if err != nil {
		return err
	}
	return c.Close()
}

// Stop stops the node: SIGTERM, which it handles by shutting down
// cleanly, then SIGKILL for whatever is left after 30 seconds.
func (b *RabbitMQ) Stop() {
	if b.broker != nil {
		b.broker.stop(30 * time.Second)
	}
}

// Close stops the node and its epmd and removes its directory.
func (b *RabbitMQ) Close() {
	b.Stop()
	if b.epmd != nil {
		b.epmd.stop(5 * time.Second)
	}
	os.RemoveAll(b.dir)
}
