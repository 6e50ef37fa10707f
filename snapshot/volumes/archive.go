package volumes

import (
	"archive/tar"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// archiveReader is a tar.Reader that tells an archive's end marker from its stream just ending:
// Go's reader takes the end of its input at an entry's boundary for the end of the archive, and
// a stream cut there (or a valid but shorter one) would otherwise read as complete.
type archiveReader struct {
	*tar.Reader
	src *eofWatch
}

type eofWatch struct {
	r   io.Reader
	eof bool
}

func (e *eofWatch) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if n == 0 && err == io.EOF {
		e.eof = true
	}
	return n, err
}

func newArchiveReader(r io.Reader) *archiveReader {
	w := &eofWatch{r: r}
	return &archiveReader{Reader: tar.NewReader(w), src: w}
}

// errNoEndMarker is the error of a tar stream that ends without its end marker.
var errNoEndMarker = fmt.Errorf("the archive ends without tar's end marker (cut short): %w", io.ErrUnexpectedEOF)

// Next is tar.Reader's, with io.EOF only at the end marker: the reader stops after its two zero
// blocks and never reads on, so a read that found the input's end means there was none.
func (a *archiveReader) Next() (*tar.Header, error) {
	h, err := a.Reader.Next()
	if err == io.EOF && a.src.eof {
		return nil, errNoEndMarker
	}
	return h, err
}

// writeSparse writes a file with holes as GNU tar's PAX sparse format 1.0 does (GNU tar's manual,
// "Storing Sparse Files", format 1.0): a PAX header with GNU.sparse.major=1, GNU.sparse.minor=0,
// GNU.sparse.name (the real name) and GNU.sparse.realsize, then an entry whose contents are the
// map (the number of data ranges, then each one's offset and length, in decimal, one a line,
// padded to a block) followed by the ranges' bytes. Go's tar writer does not write this format,
// so the blocks are written here, between entries it wrote. It reports a file that ended before
// its data did (zeros stand for the rest).
func (p *packer) writeSparse(h *tar.Header, f *os.File, data []span) (bool, error) {
	if err := p.tw.Flush(); err != nil {
		return false, err
	}
	// The map ends at the file's size, as GNU tar writes it, so that readers that size the file
	// by its map get it right.
	if n := len(data); n == 0 || data[n-1].off+data[n-1].len < h.Size {
		data = append(data, span{h.Size, 0})
	}
	var m strings.Builder
	m.WriteString(strconv.Itoa(len(data)) + "\n")
	var stored int64
	for _, s := range data {
		m.WriteString(strconv.FormatInt(s.off, 10) + "\n" + strconv.FormatInt(s.len, 10) + "\n")
		stored += s.len
	}
	sparseMap := padded([]byte(m.String()))
	stored += int64(len(sparseMap))

	records := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", h.Name) + paxRecord("GNU.sparse.realsize", strconv.FormatInt(h.Size, 10)) +
		paxRecord("size", strconv.FormatInt(stored, 10)) + paxRecord("mtime", paxTime(h)) +
		paxRecord("uid", strconv.Itoa(h.Uid)) + paxRecord("gid", strconv.Itoa(h.Gid))
	if !utf8.ValidString(h.Name) {
		records += paxRecord("hdrcharset", "BINARY")
	}
	for _, k := range []string{LinksRecord, StatRecord} {
		if v := h.PAXRecords[k]; v != "" {
			records += paxRecord(k, v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h.PAXRecords)) {
		if strings.HasPrefix(k, xattrRecord) {
			records += paxRecord(k, h.PAXRecords[k])
		}
	}
	base := h.Name[strings.LastIndex(h.Name, "/")+1:]
	ext := ustarHeader("PaxHeaders.0/"+base, tar.TypeXHeader, 0o644, 0, 0, int64(len(records)), 0)
	entry := ustarHeader("GNUSparseFile.0/"+base, tar.TypeReg, h.Mode, h.Uid, h.Gid, stored, h.ModTime.Unix())
	for _, b := range [][]byte{ext, padded([]byte(records)), entry, sparseMap} {
		if _, err := p.w.Write(b); err != nil {
			return false, err
		}
	}
	short := false
	for _, s := range data {
		cut, err := p.copy(p.w, f, s.off, s.len)
		if err != nil {
			return false, err
		}
		short = short || cut
	}
	if r := stored % 512; r != 0 {
		if _, err := p.w.Write(make([]byte, 512-r)); err != nil {
			return false, err
		}
	}
	return short, nil
}

// padded fills b with zeros up to a multiple of tar's 512-byte block.
func padded(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// paxRecord is one PAX extended header record: "length key=value\n", the length counting itself.
func paxRecord(k, v string) string {
	size := len(k) + len(v) + 3
	size += len(strconv.Itoa(size))
	rec := strconv.Itoa(size) + " " + k + "=" + v + "\n"
	if len(rec) != size { // the length's own digits grew it
		size = len(rec)
		rec = strconv.Itoa(size) + " " + k + "=" + v + "\n"
	}
	return rec
}

// paxTime is a PAX time: seconds, and a fraction when there is one.
func paxTime(h *tar.Header) string {
	sec, nsec := h.ModTime.Unix(), h.ModTime.Nanosecond()
	if nsec == 0 || sec < 0 {
		return strconv.FormatInt(sec, 10)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%09d", sec, nsec), "0")
}

// ustarHeader is a ustar header block. A number too large for its field is written as 0: the
// PAX records before it carry the real value.
func ustarHeader(name string, typ byte, mode int64, uid, gid int, size, mtime int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], truncateName(name, 100))
	octal(b[100:108], mode&0o7777)
	octal(b[108:116], int64(uid))
	octal(b[116:124], int64(gid))
	octal(b[124:136], size)
	octal(b[136:148], mtime)
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// octal writes v as zero-padded octal digits ending in NUL, or 0 when it does not fit.
func octal(field []byte, v int64) {
	s := strconv.FormatInt(v, 8)
	if v < 0 || len(s) > len(field)-1 {
		s = "0"
	}
	copy(field, strings.Repeat("0", len(field)-1-len(s))+s+"\x00")
}

// truncateName cuts a name to at most n bytes, at a character's boundary.
func truncateName(s string, n int) string {
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
