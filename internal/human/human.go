// Package human formats figures for people reading reports.
package human

import "fmt"

// Bytes formats a size with binary units: "512 B", "1.5 KiB", "20.0 GiB".
func Bytes(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := float64(b), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
