module vgpu-bridge/bench/goref

go 1.24
