"""The node agent: a DRA kubelet plugin that publishes shareable GPUs as ResourceSlices and, on
`NodePrepareResources`, writes one CDI spec per claim that hands the share's limits to libvgpu.

Split by concern, after dra-example-driver: `gpus` (this node's GPUs: NVML or mock), `slices` (pure
ResourceSlice builder) and `publisher` (diff against the API), `allocation` (pure: a claim's
shares), `cdi` (spec builder and atomic files), `checkpoint` (versioned, atomic), `state` (the
work of Prepare/Unprepare), `grpc` (protobuf in and out, nothing else), `app` (wiring).
"""
