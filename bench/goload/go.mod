module vgpu-bridge/bench/goload

go 1.24
