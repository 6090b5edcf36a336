// Command kcm-node-image writes a one-layer container image made of local
// files as an OCI image layout archive, which `ctr -n k8s.io images import`
// loads without a registry. Every --name becomes one entry of index.json
// (annotation io.containerd.image.name), all of the same manifest.
//
// usage: kcm-node-image --out FILE --name REF [--name REF ...]
//
//	[--busybox PATH]            /bin/busybox from PATH plus a link per applet
//	[--file SRC:DST[:MODE]]     a local file (MODE octal, default 0755)
//	[--text DST=CONTENT]        a file with this content (0644)
//	[--dir DST[:MODE]]          an empty directory (default 0755)
//	[--entrypoint JSON] [--cmd JSON] [--env K=V]
//
// The archive is reproducible: fixed times and owners, sorted entries.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// entry is one file system object of the layer.
type entry struct {
	name     string // without leading slash
	typeflag byte
	mode     int64
	body     []byte
	link     string
}

// epoch is the modification time of every entry (reproducible archives).
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	var names, files, texts, dirs, envs multi
	out := flag.String("out", "", "the archive to write")
	busybox := flag.String("busybox", "", "a static busybox to install as /bin/busybox with its applet links")
	entrypoint := flag.String("entrypoint", "", "the image's entrypoint, a JSON array")
	cmd := flag.String("cmd", "", "the image's command, a JSON array")
	flag.Var(&names, "name", "an image reference (repeatable)")
	flag.Var(&files, "file", "SRC:DST[:MODE] (repeatable)")
	flag.Var(&texts, "text", "DST=CONTENT (repeatable)")
	flag.Var(&dirs, "dir", "DST[:MODE] (repeatable)")
	flag.Var(&envs, "env", "K=V (repeatable)")
	flag.Parse()
	if *out == "" || len(names) == 0 {
		fail(errors.New("--out and at least one --name are required"))
	}
	entries := map[string]entry{}
	add := func(e entry) {
		e.name = strings.TrimPrefix(path.Clean("/"+e.name), "/")
		// Parent directories first, so the layer unpacks anywhere.
		for dir := path.Dir(e.name); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if _, ok := entries[dir]; !ok {
				entries[dir] = entry{name: dir, typeflag: tar.TypeDir, mode: 0o755}
			}
		}
		entries[e.name] = e
	}
	if *busybox != "" {
		if err := addBusybox(*busybox, add); err != nil {
			fail(err)
		}
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 {
			fail(fmt.Errorf("--file %q: want SRC:DST[:MODE]", f))
		}
		body, err := os.ReadFile(parts[0])
		if err != nil {
			fail(err)
		}
		mode, err := parseMode(parts, 0o755)
		if err != nil {
			fail(err)
		}
		add(entry{name: parts[1], typeflag: tar.TypeReg, mode: mode, body: body})
	}
	for _, t := range texts {
		dst, content, ok := strings.Cut(t, "=")
		if !ok {
			fail(fmt.Errorf("--text %q: want DST=CONTENT", t))
		}
		add(entry{name: dst, typeflag: tar.TypeReg, mode: 0o644, body: []byte(content)})
	}
	for _, d := range dirs {
		parts := strings.Split(d, ":")
		mode, err := parseMode(append([]string{""}, parts...), 0o755)
		if err != nil {
			fail(err)
		}
		add(entry{name: parts[0], typeflag: tar.TypeDir, mode: mode})
	}
	layer, err := layerTar(entries)
	if err != nil {
		fail(err)
	}
	archive, err := layout(layer, names, *entrypoint, *cmd, envs)
	if err != nil {
		fail(err)
	}
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, archive, 0o644); err != nil {
		fail(err)
	}
	if err := os.Rename(tmp, *out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "error: kcm-node-image: %v\n", err)
	os.Exit(1)
}

// parseMode reads the optional third field SRC:DST:MODE (octal).
func parseMode(parts []string, def int64) (int64, error) {
	if len(parts) < 3 || parts[2] == "" {
		return def, nil
	}
	m, err := strconv.ParseInt(parts[2], 8, 32)
	if err != nil {
		return 0, fmt.Errorf("mode %q: %v", parts[2], err)
	}
	return m, nil
}

// addBusybox installs busybox as /bin/busybox and one symlink per applet at
// the path `busybox --list-full` gives. The applet named busybox is left
// out: linking /bin/busybox to itself makes a symlink loop.
func addBusybox(src string, add func(entry)) error {
	body, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	list, err := exec.Command(src, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %v (is it busybox?)", src, err)
	}
	add(entry{name: "bin/busybox", typeflag: tar.TypeReg, mode: 0o755, body: body})
	for _, applet := range strings.Fields(string(list)) {
		if path.Base(applet) == "busybox" {
			continue
		}
		add(entry{name: applet, typeflag: tar.TypeSymlink, mode: 0o777, link: "/bin/busybox"})
	}
	// What a stock busybox image has besides its applets.
	add(entry{name: "tmp", typeflag: tar.TypeDir, mode: 0o1777})
	for _, d := range []string{"etc", "root", "var", "home", "proc", "sys", "dev"} {
		add(entry{name: d, typeflag: tar.TypeDir, mode: 0o755})
	}
	add(entry{name: "etc/passwd", typeflag: tar.TypeReg, mode: 0o644,
		body: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")})
	add(entry{name: "etc/group", typeflag: tar.TypeReg, mode: 0o644,
		body: []byte("root:x:0:\nnobody:x:65534:\n")})
	return nil
}

func layerTar(entries map[string]entry) ([]byte, error) {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch e.typeflag {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.link
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// layout wraps one uncompressed layer in an OCI image layout archive.
func layout(layer []byte, names []string, entrypoint, cmd string, env []string) ([]byte, error) {
	parseArray := func(flagName, v string) ([]string, error) {
		if v == "" {
			return nil, nil
		}
		var out []string
		if err := json.Unmarshal([]byte(v), &out); err != nil {
			return nil, fmt.Errorf("--%s %q: want a JSON array of strings: %v", flagName, v, err)
		}
		return out, nil
	}
	ep, err := parseArray("entrypoint", entrypoint)
	if err != nil {
		return nil, err
	}
	cm, err := parseArray("cmd", cmd)
	if err != nil {
		return nil, err
	}
	env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": ep, "Cmd": cm, "Env": env},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
	})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: len(config)},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: digest(layer), Size: len(layer)}},
	})
	if err != nil {
		return nil, err
	}
	index := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json"}
	var manifests []descriptor
	for _, n := range names {
		tag := n[strings.LastIndex(n, ":")+1:]
		manifests = append(manifests, descriptor{
			MediaType:   "application/vnd.oci.image.manifest.v1+json",
			Digest:      digest(manifest),
			Size:        len(manifest),
			Annotations: map[string]string{"io.containerd.image.name": n, "org.opencontainers.image.ref.name": tag},
			Platform:    map[string]string{"architecture": "amd64", "os": "linux"},
		})
	}
	index["manifests"] = manifests
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(name string, body []byte) error {
		h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	files := []struct {
		name string
		body []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{"blobs/sha256/" + strings.TrimPrefix(digest(layer), "sha256:"), layer},
		{"blobs/sha256/" + strings.TrimPrefix(digest(config), "sha256:"), config},
		{"blobs/sha256/" + strings.TrimPrefix(digest(manifest), "sha256:"), manifest},
	}
	for _, f := range files {
		if err := write(f.name, f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
