//! The messages of the kubelet's PodResources v1 `List` call
//! (`proto/podresources_v1.proto`), as prost types: the fields stallwatch
//! reads, with the proto's field numbers. The others (CPU ids, memory,
//! topology, dynamic resources) are skipped by the decoder as unknown fields,
//! so they cost no allocation. Written to match the proto rather than made
//! by `prost-build`, so the build needs no `protoc`; the stand-in kubelet of
//! the tests serves the proto itself (tests/e2e/kubelet.py).

/// `v1.ListPodResourcesRequest`: empty.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesRequest {}

/// `v1.ListPodResourcesResponse`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `v1.PodResources`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `v1.ContainerResources` (fields 3-5 skipped).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// `v1.ContainerDevices` (field 3, topology, skipped).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// The full method name of `List`.
pub const LIST: &str = "/v1.PodResourcesLister/List";

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// A `ContainerResources` as the kubelet encodes it, with the fields
    /// stallwatch skips: cpu_ids (3), memory (4) and a topology (3 of
    /// ContainerDevices).
    #[test]
    fn skipped_fields_decode_around() {
        let mut bytes = Vec::new();
        // name = "main"
        bytes.extend_from_slice(&[0x0a, 4, b'm', b'a', b'i', b'n']);
        // devices { resource_name = "nvidia.com/gpu", device_ids = "GPU-1",
        //           topology { nodes { ID = 1 } } }
        let mut device = vec![0x0a, 14];
        device.extend_from_slice(b"nvidia.com/gpu");
        device.extend_from_slice(&[0x12, 5]);
        device.extend_from_slice(b"GPU-1");
        device.extend_from_slice(&[0x1a, 4, 0x0a, 2, 0x08, 1]);
        bytes.extend_from_slice(&[0x12, device.len() as u8]);
        bytes.extend_from_slice(&device);
        // cpu_ids = [2, 3] (packed)
        bytes.extend_from_slice(&[0x1a, 2, 2, 3]);
        // memory { memory_type = "memory", size = 1 }
        bytes.extend_from_slice(&[0x22, 10, 0x0a, 6]);
        bytes.extend_from_slice(b"memory");
        bytes.extend_from_slice(&[0x10, 1]);
        let c = ContainerResources::decode(bytes.as_slice()).unwrap();
        assert_eq!(c.name, "main");
        assert_eq!(c.devices.len(), 1);
        assert_eq!(c.devices[0].resource_name, "nvidia.com/gpu");
        assert_eq!(c.devices[0].device_ids, ["GPU-1"]);
    }
}
