package vfs

import (
	"os"
	"strings"
)

// BootID identifies the current boot of the machine (Linux's
// /proc/sys/kernel/random/boot_id), or "" where it cannot be read. Data
// written in the same boot cannot have been torn by a power loss: the
// kernel's page cache holds every completed write until it reaches the
// disk.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
