// Package buildinfo tells which ferry this is: the version stamped at link time, else what the Go
// toolchain recorded about the build.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// version is set with -ldflags "-X github.com/ferrykube/ferry/internal/buildinfo.version=v1.2.3".
var version = ""

// Info describes a ferry binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Read returns the build information of the running binary.
func Read() Info {
	info := Info{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}
