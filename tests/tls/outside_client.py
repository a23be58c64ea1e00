"""An outside gRPC client (python3-grpcio) for the TLS test: calls METHOD (Status or Scrub:
requests that hold only their header) of a coordinator over plaintext or TLS, with the given
PEM files, and prints the outcome: OK, or the gRPC status code's name (UNAVAILABLE when the
handshake is refused).

  outside_client.py ADDRESS TOKEN METHOD plaintext
  outside_client.py ADDRESS TOKEN METHOD tls CA CERT KEY
"""
import sys

import grpc


def varint(n):
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def main():
    address, token, method, mode = sys.argv[1:5]
    if mode == "tls":
        ca, cert, key = (open(p, "rb").read() for p in sys.argv[5:8])
        credentials = grpc.ssl_channel_credentials(ca, key, cert)
        # As ecps' own clients do: the certificate names the role, not the host.
        channel = grpc.secure_channel(
            address, credentials, options=[("grpc.ssl_target_name_override", "coordinator")])
    else:
        channel = grpc.insecure_channel(address)
    header = field(1, token.encode()) + field(3, b"outside-client")
    call = channel.unary_unary("/ecps.v1.Coordinator/" + method)
    try:
        call(field(1, header), timeout=30)
        print("OK")
    except grpc.RpcError as e:
        print(e.code().name)


if __name__ == "__main__":
    main()
