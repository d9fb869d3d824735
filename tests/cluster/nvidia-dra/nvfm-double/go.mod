module github.com/NVIDIA/go-nvfm

go 1.24
