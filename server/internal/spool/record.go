package spool

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/engine"
)

const (
	headerSize = 8
	// maxRecordBytes guards against reading a corrupt length as a huge allocation.
	maxRecordBytes = 1 << 30
)

// record is one spooled push item.
type record struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	// MessageID is the id the buffered answer promised (absent in records of
	// brokers that did not keep it: the replay mints one).
	MessageID   string          `json:"messageId,omitempty"`
	TraceID     string          `json:"traceId,omitempty"`
	ProducerSub string          `json:"producerSub,omitempty"`
	Payload     json.RawMessage `json:"payload"`
}

// encodeRecords frames items as the file format wants them: per item, u32le
// length, u32le CRC-32 (IEEE) of the body, then the JSON body.
func encodeRecords(items []engine.PushItem) ([]byte, error) {
	var buf []byte
	for _, it := range items {
		body, err := json.Marshal(record{
			Queue: it.Queue, Partition: it.Partition, TransactionID: it.TransactionID, MessageID: messageID(it.MessageID),
			TraceID: it.TraceID, ProducerSub: it.ProducerSub, Payload: it.Payload,
		})
		if err != nil {
			return nil, fmt.Errorf("spool: encode: %w", err)
		}
		var hdr [headerSize]byte
		binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(body)))
		binary.LittleEndian.PutUint32(hdr[4:8], crc32.ChecksumIEEE(body))
		buf = append(buf, hdr[:]...)
		buf = append(buf, body...)
	}
	return buf, nil
}

// messageID is a record's form of a preset message id: empty when none is set.
func messageID(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

// sizedRecord is a decoded record and the bytes it takes in its file.
type sizedRecord struct {
	record
	size int64
}

// recordReader streams a spool file record by record, so reading a file
// holds one record in memory, not the file.
type recordReader struct {
	file   *os.File
	buf    *bufio.Reader
	offset int64 // end of the last record read
	size   int64
	ended  bool // a torn or corrupt record ended the file: nothing after it counts
}

// openRecords reads path from offset, which must be a record boundary.
func openRecords(path string, offset int64) (*recordReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err == nil {
		_, err = f.Seek(offset, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &recordReader{file: f, buf: bufio.NewReaderSize(f, 64<<10), offset: offset, size: info.Size()}, nil
}

func (r *recordReader) Close() error { return r.file.Close() }

// next decodes the next record; false at the end of the file or at its first
// torn or corrupt record, which ends it (a torn tail was never acknowledged).
func (r *recordReader) next() (sizedRecord, bool) {
	if r.ended {
		return sizedRecord{}, false
	}
	rec, ok := r.decodeNext()
	r.ended = !ok
	return rec, ok
}

func (r *recordReader) decodeNext() (sizedRecord, bool) {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r.buf, hdr[:]); err != nil {
		return sizedRecord{}, false
	}
	n := int64(binary.LittleEndian.Uint32(hdr[0:4]))
	if n > maxRecordBytes || n > r.size-r.offset-headerSize {
		return sizedRecord{}, false
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r.buf, body); err != nil || crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(hdr[4:8]) {
		return sizedRecord{}, false
	}
	var rec record
	if err := json.Unmarshal(body, &rec); err != nil {
		return sizedRecord{}, false
	}
	r.offset += headerSize + n
	return sizedRecord{record: rec, size: headerSize + n}, true
}

// countRecords counts a file's records from their headers alone, up to a torn
// tail, and returns the file's size. A record whose body is corrupt counts
// here; the drain stops at it and settles the difference.
func countRecords(path string) (count int, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size = info.Size()
	var hdr [headerSize]byte
	for offset := int64(0); offset+headerSize <= size; count++ {
		if _, err := f.ReadAt(hdr[:], offset); err != nil {
			return count, size, err
		}
		n := int64(binary.LittleEndian.Uint32(hdr[0:4]))
		if n > maxRecordBytes || offset+headerSize+n > size {
			break
		}
		offset += headerSize + n
	}
	return count, size, nil
}
