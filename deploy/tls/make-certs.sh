#!/usr/bin/env bash
# Make a private certificate authority and TLS certificates for a Dask cluster.
#
#   deploy/tls/make-certs.sh OUT_DIR [HOST_OR_IP ...]
#
# Writes into OUT_DIR (created with mode 700):
#   ca.pem                             the CA certificate (give it to every party)
#   ca-key.pem                         the CA key (keep it offline; only this script needs it)
#   scheduler.pem, scheduler-key.pem   the scheduler's certificate and key
#   worker.pem, worker-key.pem         the workers' certificate and key
#   client.pem, client-key.pem         the certificate and key scalenc (the client) presents
#
# Dask uses mutual TLS: every connection verifies the peer's certificate against ca.pem
# (CERT_REQUIRED on both ends), so a client without a certificate signed by this CA is
# refused. Dask does not check host names, but the certificates still name 127.0.0.1,
# localhost and any HOST_OR_IP given, for other tools. Keys are ECDSA P-256, valid 365 days
# (set DAYS to change).
set -euo pipefail

out=${1:?usage: make-certs.sh OUT_DIR [HOST_OR_IP ...]}
shift
days=${DAYS:-365}
mkdir -p "$out"
chmod 700 "$out"
cd "$out"

san="DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
  if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san="$san,IP:$host"; else san="$san,DNS:$host"; fi
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -days "$days" \
  -keyout ca-key.pem -out ca.pem -subj "/CN=scalenc-dask-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null

for name in scheduler worker client; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -keyout "$name-key.pem" -out "$name.csr" \
    -subj "/CN=scalenc-dask-$name" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' \
    "$san" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
    -sha256 -days "$days" -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
done
rm -f ca.srl
chmod 600 ./*-key.pem
echo "certificates written to $(pwd)"
