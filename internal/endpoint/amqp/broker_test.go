package amqp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// broker is a private RabbitMQ node run from the Debian package's scripts
// (scripts/install-test-deps.sh installs them): its own node name, ports,
// data, logs, configuration and Erlang cookie, all under a temporary
// directory, so that it neither uses nor disturbs a system RabbitMQ.
type broker struct {
	dir      string
	node     string
	port     int // AMQP
	tlsPort  int // AMQP over TLS, with a certificate of ca.pem for 127.0.0.1
	distPort int // Erlang distribution
	cmd      *exec.Cmd
	exited   chan struct{}
}

// rabbitmqServer is the script that runs the broker in the foreground.
// Not /usr/sbin/rabbitmq-server: as root, that one switches to the
// rabbitmq user, who cannot write the test's directory.
const rabbitmqServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// startTimeout bounds the broker's boot, usually 5 to 15 seconds.
const startTimeout = 60 * time.Second

// newBroker prepares a broker's directory; start runs it.
func newBroker() (_ *broker, err error) {
	if _, err := os.Stat(rabbitmqServer); err != nil {
		return nil, fmt.Errorf("RabbitMQ is not installed (%v): run scripts/install-test-deps.sh (Debian package rabbitmq-server)", err)
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
	b := &broker{dir: dir, node: fmt.Sprintf("herald-test-%d@localhost", os.Getpid())}
	for _, p := range []*int{&b.port, &b.tlsPort, &b.distPort} {
		if *p, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := writeCertificates(dir); err != nil {
		return nil, err
	}
	files := map[string]string{
		"rabbitmq.conf": fmt.Sprintf(`# A low disk limit: a nearly full CI disk must not block publishers.
disk_free_limit.absolute = 1MB
listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
`, b.tlsPort, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "", // instead of /etc/rabbitmq/rabbitmq-env.conf
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return b, os.Mkdir(filepath.Join(dir, "home"), 0o755)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (b *broker) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", b.port) }

func (b *broker) tlsURL() string {
	return fmt.Sprintf("amqps://guest:guest@127.0.0.1:%d/", b.tlsPort)
}

func (b *broker) caFile() string { return filepath.Join(b.dir, "ca.pem") }

func (b *broker) env() []string {
	return append(os.Environ(),
		"HOME="+filepath.Join(b.dir, "home"), // the Erlang cookie
		"RABBITMQ_NODENAME="+b.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(b.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(b.distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(b.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(b.dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(b.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(b.dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(b.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(b.dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(b.dir, "rabbitmq.pid"),
	)
}

// start runs the broker and waits until it accepts AMQP connections.
func (b *broker) start() error {
	out, err := os.OpenFile(filepath.Join(b.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	b.cmd = exec.Command(rabbitmqServer)
	b.cmd.Dir, b.cmd.Env, b.cmd.Stdout, b.cmd.Stderr = b.dir, b.env(), out, out
	// Its own process group, to stop the script, the Erlang VM and its
	// helpers together; and stopped (the script stops the VM) should
	// the test binary die without cleaning up.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", rabbitmqServer, err)
	}
	b.exited = make(chan struct{})
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		err := b.ready()
		if err == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("rabbitmq-server exited at startup (%v); its log ends with:\n%s", b.cmd.ProcessState, b.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.stop()
			return fmt.Errorf("RabbitMQ is not ready after %v (%v); its log ends with:\n%s", startTimeout, err, b.logTail())
		}
	}
}

// ready reports whether the broker accepts connections on both ports.
func (b *broker) ready() error {
	conn, err := amqp.Dial(b.url())
	if err != nil {
		return err
	}
	conn.Close()
	// The TLS listener starts after the plain one.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.tlsPort))
	if err != nil {
		return err
	}
	return c.Close()
}

// logTail returns the end of the broker's logs.
func (b *broker) logTail() string {
	var tail string
	for _, name := range []string{"stdout.log", filepath.Join("log", b.node+".log")} {
		data, _ := os.ReadFile(filepath.Join(b.dir, name))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		tail += fmt.Sprintf("--- %s:\n%s\n", name, strings.Join(lines[max(len(lines)-15, 0):], "\n"))
	}
	return tail
}

// stop stops the broker: SIGTERM, which it handles by shutting down
// cleanly, then SIGKILL for whatever is left of its process group.
func (b *broker) stop() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	pgid := b.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(os.Stderr, "kill RabbitMQ process group %d: %v\n", pgid, err)
	}
	<-b.exited
}

// writeCertificates writes a CA (ca.pem) and a certificate it signed for
// 127.0.0.1 (server.pem, server.key) into dir.
func writeCertificates(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	cert := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, cert, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: der},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}
