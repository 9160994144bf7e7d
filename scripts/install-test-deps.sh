#!/bin/sh
# install-test-deps.sh installs the aws CLI and boto3 that the SNS API's
# tests drive, moto's S3 server for the tier store's tests and Python's
# grpcio for the PublishStream RPC's (see below),
# and the servers that herald's endpoint tests run
# against: nats-server (internal/endpoint/nats) and RabbitMQ
# (internal/endpoint/amqp), and the Chromium browser that the dashboard's
# test drives headless (internal/dashboard), from the Debian packages. Kafka
# needs nothing: its tests use franz-go's in-process cluster.
#
# It installs only what is missing, so running it again does nothing, and
# it needs root (or password-less sudo) only when it installs something.
#
# The tests start servers of their own, on free loopback ports, with a
# private RabbitMQ node name and data directory, so a system nats-server or
# RabbitMQ service does not get in their way. Still, the RabbitMQ service
# is not started by the installation: a CI machine has no use for it.
set -eu

die() {
	echo "install-test-deps: $*" >&2
	exit 1
}

# The SNS API's tests (internal/api) drive the real aws CLI and boto3, which
# come from PyPI into a virtual environment: $HERALD_AWS_VENV, by default
# ${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/venv, where the tests look too.
# It needs python3 with its venv module (Debian: python3-venv), and no root.
# venv_install DIR PACKAGES WHAT installs PACKAGES (a list) from PyPI into
# a new virtual environment DIR, for WHAT.
venv_install() {
	command -v python3 >/dev/null 2>&1 ||
		die "python3 is missing; install it (Debian: python3 python3-venv) for $3"
	echo "install-test-deps: installing $2 from PyPI into $1"
	python3 -m venv "$1" ||
		die "python3 -m venv $1 failed; install python3's venv module (Debian: python3-venv)"
	# shellcheck disable=SC2086 # $2 is a list
	"$1/bin/pip" install --quiet $2 ||
		die "pip install $2 failed; check the network and access to PyPI, then run this script again"
}
aws_venv=${HERALD_AWS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/venv}
aws_packages="awscli==1.46.3 boto3==1.44.5"
if [ -x "$aws_venv/bin/aws" ] && "$aws_venv/bin/python" -c 'import boto3' 2>/dev/null; then
	echo "install-test-deps: the aws CLI and boto3 are installed in $aws_venv"
else
	venv_install "$aws_venv" "$aws_packages" "the SNS API's aws CLI tests"
fi

# The tier store's tests (internal/tier) run moto_server, an S3-compatible
# server from PyPI, from its own virtual environment: $HERALD_MOTO_VENV, by
# default ${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/moto-venv, where the
# tests look first (then on $PATH). Its own, so that moto's dependencies do
# not move the aws CLI's.
moto_venv=${HERALD_MOTO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/moto-venv}
moto_package="moto[server]==5.2.1"
if [ -x "$moto_venv/bin/moto_server" ]; then
	echo "install-test-deps: moto_server is installed in $moto_venv"
elif command -v moto_server >/dev/null 2>&1; then
	echo "install-test-deps: moto_server is installed ($(command -v moto_server))"
else
	venv_install "$moto_venv" "$moto_package" "the tier store's moto tests"
	[ -x "$moto_venv/bin/moto_server" ] || die "moto_server is still missing from $moto_venv after installing $moto_package"
fi

# The PublishStream RPC's test (tests/e2e/grpc_stream_test.go) publishes
# from Python's grpcio, the stock gRPC client of another language, with
# stubs that grpcio-tools generates at test time: from its own virtual
# environment, $HERALD_GRPC_VENV, by default
# ${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/grpc-venv, where the test
# looks.
grpc_venv=${HERALD_GRPC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/grpc-venv}
grpc_packages="grpcio==1.85.1 grpcio-tools==1.85.1"
if [ -x "$grpc_venv/bin/python" ] && "$grpc_venv/bin/python" -c 'import grpc, grpc_tools' 2>/dev/null; then
	echo "install-test-deps: grpcio and grpcio-tools are installed in $grpc_venv"
else
	venv_install "$grpc_venv" "$grpc_packages" "the PublishStream RPC's Python test"
fi

# have_nats and have_rabbitmq look where the tests look.
have_nats() {
	command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || [ -x /usr/bin/nats-server ]
}
have_rabbitmq() {
	[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]
}
have_chromium() {
	command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]
}

missing=""
if have_nats; then
	echo "install-test-deps: nats-server is installed"
else
	missing="$missing nats-server"
fi
if have_rabbitmq; then
	echo "install-test-deps: rabbitmq-server is installed"
else
	missing="$missing rabbitmq-server"
fi
if have_chromium; then
	echo "install-test-deps: chromium is installed"
else
	missing="$missing chromium"
fi
if [ -z "$missing" ]; then
	echo "install-test-deps: nothing to do"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 ||
	die "missing:$missing, and there is no apt-get to install it with; install the Debian/Ubuntu packages$missing (or equivalents) by hand"

if [ "$(id -u)" -eq 0 ]; then
	as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	as_root="sudo -n"
else
	die "missing:$missing; installing it needs root: run this script as root, or with password-less sudo"
fi

# Keep the packages' services from being started during installation,
# unless the machine already has a policy about that.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $as_root tee "$policy" >/dev/null || die "cannot write $policy"
	$as_root chmod 755 "$policy"
	trap '$as_root rm -f "$policy"' EXIT
fi

echo "install-test-deps: installing$missing"
$as_root apt-get update ||
	die "apt-get update failed; check the network and the APT sources, then run this script again"
# shellcheck disable=SC2086 # $missing is a list of package names
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing ||
	die "apt-get install$missing failed; see the messages above"

have_nats || die "nats-server is still missing after installing it"
have_rabbitmq || die "rabbitmq-server is installed but /usr/lib/rabbitmq/bin/rabbitmq-server, which the tests run, is missing"
have_chromium || die "chromium is still missing after installing it"
echo "install-test-deps: installed$missing"
