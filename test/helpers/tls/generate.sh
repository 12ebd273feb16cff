#!/usr/bin/env bash
# Regenerates the test-only TLS files: a CA, a certificate for 127.0.0.1 and localhost that the
# test redis-servers present, one for the name localhost only (a server reached by an address
# its certificate does not name), and a client certificate for servers that require one. Valid
# for 100 years, so the suite never fails on a date. Never use these keys outside the tests.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
openssl ecparam -name prime256v1 -genkey -noout -out ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj '/CN=billing test CA' -out ca.pem
for name in server localhost client; do
  openssl ecparam -name prime256v1 -genkey -noout -out "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=billing test $name" -out "$name.csr"
  if [ "$name" = server ]; then
    ext='subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth'
  elif [ "$name" = localhost ]; then
    ext='subjectAltName=DNS:localhost
extendedKeyUsage=serverAuth,clientAuth'
  else
    ext='extendedKeyUsage=clientAuth'
  fi
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 \
    -days "$days" -extfile <(printf '%s\n' "$ext") -out "$name.pem"
  rm "$name.csr"
done
rm -f ca.srl ca.key
# The client's key again, encrypted (PKCS#8, AES-256), and the file holding its passphrase.
printf '%s\n' 'billing test passphrase' > client-key.pass
openssl pkcs8 -topk8 -v2 aes-256-cbc -in client.key -passout file:client-key.pass \
  -out client-encrypted.key
