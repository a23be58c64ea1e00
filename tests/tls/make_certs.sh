#!/usr/bin/env bash
# Makes the TLS test certificates with openssl, into DIR (created):
#   ca.pem ca.key                  the job's CA
#   ROLE.pem ROLE.key              for ROLE in coordinator server worker admin (CN=ROLE), by ca
#   other-ca.pem, other-worker.*   a second CA, and a worker certificate it signed
#   expired-worker.*               a worker certificate of ca whose validity ended in 2020
#   intruder.*                     a certificate of ca whose CN is no role
#   etcd.pem etcd.key              etcd's serving certificate by ca (SAN IP:127.0.0.1)
# EC P-256 keys, valid for two days: each test run makes its own.
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
ca() {  # name CN
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" 2>/dev/null
}
signed() {  # name CN ca
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -out "$1.pem" \
    -days 2 2>/dev/null
  rm -f "$1.csr"
}
ca ca "ecps test CA"
ca other-ca "another CA"
for role in coordinator server worker admin; do signed "$role" "$role" ca; done
signed other-worker worker other-ca
signed intruder intruder ca

# etcd's serving certificate (the etcd tests), its address in the SAN, which gRPC checks.
key etcd
openssl req -new -key etcd.key -out etcd.csr -subj "/CN=etcd" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >etcd.ext
openssl x509 -req -in etcd.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out etcd.pem -days 2 \
  -extfile etcd.ext 2>/dev/null
rm -f etcd.csr etcd.ext

# openssl x509 cannot set past dates (before OpenSSL 3.4); openssl ca can.
key expired-worker
openssl req -new -key expired-worker.key -out expired-worker.csr -subj "/CN=worker" 2>/dev/null
mkdir -p ca-db
: >ca-db/index.txt
echo 1000 >ca-db/serial
cat >ca-db/ca.cnf <<'CNF'
[ca]
default_ca = test_ca
[test_ca]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = any_cn
unique_subject = no
[any_cn]
commonName = supplied
CNF
openssl ca -batch -config ca-db/ca.cnf -cert ca.pem -keyfile ca.key -in expired-worker.csr \
  -out expired-worker.pem -startdate 20200101000000Z -enddate 20200102000000Z -notext \
  >/dev/null 2>&1
rm -f expired-worker.csr
chmod 600 ./*.key
