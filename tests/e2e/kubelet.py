"""A stand-in kubelet: the PodResources v1 service on a unix socket, generated at test
time from the vendored proto (crates/collector/proto/podresources_v1.proto) with the
protoc that grpcio-tools bundles, and served by grpcio; and sockets that misbehave: one
that accepts and never answers, one that answers garbage."""

import importlib
import socket
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "crates" / "collector" / "proto" / "podresources_v1.proto"

_generated = None


def generated():
    """(messages module, service module), generated once per test session."""
    global _generated
    if _generated is None:
        out = Path(tempfile.mkdtemp(prefix="podresources-"))
        code = protoc.main(
            ["protoc", f"-I{PROTO.parent}", f"--python_out={out}", f"--grpc_python_out={out}", PROTO.name]
        )
        assert code == 0, f"protoc failed on {PROTO}"
        sys.path.insert(0, str(out))
        _generated = (
            importlib.import_module("podresources_v1_pb2"),
            importlib.import_module("podresources_v1_pb2_grpc"),
        )
    return _generated


def pod(namespace, name, *containers):
    return {"namespace": namespace, "name": name, "containers": list(containers)}


def container(name, resource=None, *device_ids):
    devices = [(resource, list(device_ids))] if resource else []
    return {"name": name, "devices": devices}


class Kubelet:
    """Serves `pods` (from pod() and container()) until stopped; counts the calls."""

    def __init__(self, path, pods):
        self.path = Path(path)
        self.pods = pods
        self.calls = 0
        self.server = None

    def start(self):
        pb, pb_grpc = generated()
        kubelet = self

        class Lister(pb_grpc.PodResourcesListerServicer):
            def List(self, request, context):
                kubelet.calls += 1
                return pb.ListPodResourcesResponse(pod_resources=[kubelet.message(p) for p in kubelet.pods])

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_PodResourcesListerServicer_to_server(Lister(), self.server)
        self.server.add_insecure_port(f"unix:{self.path}")
        self.server.start()
        return self

    @staticmethod
    def message(p):
        pb, _ = generated()
        return pb.PodResources(
            namespace=p["namespace"],
            name=p["name"],
            containers=[
                pb.ContainerResources(
                    name=c["name"],
                    devices=[pb.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in c["devices"]],
                    # What a real kubelet also sends, which the daemon skips.
                    cpu_ids=[2, 3],
                    memory=[pb.ContainerMemory(memory_type="memory", size=1 << 30)],
                )
                for c in p["containers"]
            ],
        )

    def stop(self):
        if self.server is not None:
            self.server.stop(grace=None).wait()
            self.server = None
        self.path.unlink(missing_ok=True)


class BadSocket:
    """A unix socket that accepts every connection and then either never answers
    (`answer=None`) or writes `answer` and keeps the connection open."""

    def __init__(self, path, answer=None):
        self.path = Path(path)
        self.answer = answer
        self.accepted = 0
        self.held = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.stopped = threading.Event()

    def start(self):
        self.listener.bind(str(self.path))
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        threading.Thread(target=self.serve, daemon=True).start()
        return self

    def serve(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            self.held.append(conn)
            if self.answer is not None:
                try:
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def stop(self):
        self.stopped.set()
        for conn in self.held:
            conn.close()
        self.listener.close()
        self.path.unlink(missing_ok=True)
