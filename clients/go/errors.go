package journald

import (
	"context"
	"errors"
	"strings"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ErrorTrailer is the trailing metadata key carrying a serialized journald.v1.ErrorDetail.
const ErrorTrailer = "journald-error-bin"

// The machine codes: the words of the proto's ErrorCode enum (docs/protocol.md#error-codes);
// tests/unit/docs/test_contract_enums.py keeps this table equal to it.
const (
	CodeSessionNotFound         = "session_not_found"
	CodeSessionExists           = "session_exists"
	CodeInvalidID               = "invalid_id"
	CodeInvalidRecord           = "invalid_record"
	CodeSeqGap                  = "seq_gap"
	CodeSeqConflict             = "seq_conflict"
	CodeLocked                  = "locked"
	CodeLeaseLost               = "lease_lost"
	CodeCompleted               = "completed"
	CodeInteractivityMismatch   = "interactivity_mismatch"
	CodeProviderChanged         = "provider_changed"
	CodeFingerprintDrift        = "fingerprint_drift"
	CodeVersionUnsupported      = "version_unsupported"
	CodeStoreCorrupted          = "store_corrupted"
	CodeTurnRunning             = "turn_running"
	CodeCheckpointNotFound      = "checkpoint_not_found"
	CodeSessionMismatch         = "session_mismatch"
	CodeCheckpointImportInvalid = "checkpoint_import_invalid"
	CodeInvalidCheckpointID     = "invalid_checkpoint_id"
	CodeInvalidDigest           = "invalid_digest"
	CodeInvalidRequest          = "invalid_request"
	CodeAttachmentNotFound      = "attachment_not_found"
	CodeBackendUnavailable      = "backend_unavailable"
	CodeStorageFull             = "storage_full"
	CodeInternal                = "internal"
	CodeResponseTooLarge        = "response_too_large"
	CodeUnsupported             = "unsupported"
	CodePermissionDenied        = "permission_denied"
	CodeResourceExhausted       = "resource_exhausted"
)

// Error is every failure the daemon reports, rebuilt from the `journald-error-bin`
// trailer (or, without it, from the google.rpc.ErrorInfo status detail, or from the bare
// gRPC status, whose snake_case name becomes the code, e.g. "unavailable"; a bare INTERNAL or
// UNKNOWN is the transport failing and becomes "unavailable" too: see transportFailure).
//
// Match a kind with errors.Is against the sentinels (errors.Is(err, journald.ErrLocked))
// and read the facts with errors.As:
//
//	var jerr *journald.Error
//	if errors.As(err, &jerr) { fmt.Println(jerr.Code, jerr.Metadata["holder_pid"], jerr.Diff) }
type Error struct {
	// Code is the machine code, e.g. "locked".
	Code string
	// Message says what happened and what to do.
	Message string
	// Metadata holds structured facts, e.g. run_id, seq, holder_pid.
	Metadata map[string]string
	// Diff holds the per-field drift lines of fingerprint_drift ("model: a -> b").
	Diff []string
	// Status is the gRPC status code of the call.
	Status codes.Code
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches sentinels by code: errors.Is(err, ErrFingerprintDrift).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel() && t.Code == e.Code
}

func (e *Error) sentinel() bool { return e.Message == "" && e.Metadata == nil && e.Diff == nil }

// Sentinels for errors.Is, one per machine code.
var (
	ErrSessionNotFound         = &Error{Code: CodeSessionNotFound, Status: codes.NotFound}
	ErrSessionExists           = &Error{Code: CodeSessionExists, Status: codes.AlreadyExists}
	ErrInvalidID               = &Error{Code: CodeInvalidID, Status: codes.InvalidArgument}
	ErrInvalidRecord           = &Error{Code: CodeInvalidRecord, Status: codes.InvalidArgument}
	ErrSeqGap                  = &Error{Code: CodeSeqGap, Status: codes.FailedPrecondition}
	ErrSeqConflict             = &Error{Code: CodeSeqConflict, Status: codes.Aborted}
	ErrLocked                  = &Error{Code: CodeLocked, Status: codes.Aborted}
	ErrLeaseLost               = &Error{Code: CodeLeaseLost, Status: codes.FailedPrecondition}
	ErrCompleted               = &Error{Code: CodeCompleted, Status: codes.FailedPrecondition}
	ErrInteractivityMismatch   = &Error{Code: CodeInteractivityMismatch, Status: codes.FailedPrecondition}
	ErrProviderChanged         = &Error{Code: CodeProviderChanged, Status: codes.FailedPrecondition}
	ErrFingerprintDrift        = &Error{Code: CodeFingerprintDrift, Status: codes.FailedPrecondition}
	ErrVersionUnsupported      = &Error{Code: CodeVersionUnsupported, Status: codes.InvalidArgument}
	ErrStoreCorrupted          = &Error{Code: CodeStoreCorrupted, Status: codes.DataLoss}
	ErrTurnRunning             = &Error{Code: CodeTurnRunning, Status: codes.FailedPrecondition}
	ErrCheckpointNotFound      = &Error{Code: CodeCheckpointNotFound, Status: codes.NotFound}
	ErrSessionMismatch         = &Error{Code: CodeSessionMismatch, Status: codes.InvalidArgument}
	ErrCheckpointImportInvalid = &Error{Code: CodeCheckpointImportInvalid, Status: codes.InvalidArgument}
	ErrInvalidCheckpointID     = &Error{Code: CodeInvalidCheckpointID, Status: codes.InvalidArgument}
	ErrInvalidDigest           = &Error{Code: CodeInvalidDigest, Status: codes.InvalidArgument}
	ErrInvalidRequest          = &Error{Code: CodeInvalidRequest, Status: codes.InvalidArgument}
	ErrAttachmentNotFound      = &Error{Code: CodeAttachmentNotFound, Status: codes.NotFound}
	ErrBackendUnavailable      = &Error{Code: CodeBackendUnavailable, Status: codes.Unavailable}
	ErrStorageFull             = &Error{Code: CodeStorageFull, Status: codes.ResourceExhausted}
	ErrInternal                = &Error{Code: CodeInternal, Status: codes.Internal}
	ErrResponseTooLarge        = &Error{Code: CodeResponseTooLarge, Status: codes.ResourceExhausted}
	ErrUnsupported             = &Error{Code: CodeUnsupported, Status: codes.Unimplemented}
	// ErrPermissionDenied: the run belongs to another uid of a shared daemon, or (raised by
	// Connect itself, before dialing) the socket is not owned by the expected daemon uid.
	ErrPermissionDenied = &Error{Code: CodePermissionDenied, Status: codes.PermissionDenied}
	// ErrResourceExhausted: a per-peer limit of the daemon was reached (Metadata["limit"],
	// Metadata["flag"]); release what you hold before retrying, never in a tight loop.
	ErrResourceExhausted = &Error{Code: CodeResourceExhausted, Status: codes.ResourceExhausted}
)

// Sentinels lists every sentinel by code (the mapping table).
var Sentinels = map[string]*Error{}

func init() {
	for _, s := range []*Error{
		ErrSessionNotFound, ErrSessionExists, ErrInvalidID, ErrInvalidRecord, ErrSeqGap,
		ErrSeqConflict, ErrLocked, ErrLeaseLost, ErrCompleted, ErrInteractivityMismatch,
		ErrProviderChanged, ErrFingerprintDrift, ErrVersionUnsupported, ErrStoreCorrupted,
		ErrTurnRunning, ErrCheckpointNotFound, ErrSessionMismatch, ErrCheckpointImportInvalid,
		ErrAttachmentNotFound, ErrInvalidCheckpointID, ErrInvalidDigest, ErrInvalidRequest,
		ErrBackendUnavailable, ErrStorageFull, ErrInternal, ErrResponseTooLarge, ErrUnsupported,
		ErrPermissionDenied,
		ErrResourceExhausted,
	} {
		Sentinels[s.Code] = s
	}
}

// ErrorCode returns the machine code of err ("" when err is not a journald error).
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// fromGRPC turns a failed call's error (and its trailer, if read) into an *Error.
// Context cancellation by the caller is passed through unchanged.
func fromGRPC(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	out := &Error{Status: st.Code(), Message: st.Message()}
	for _, raw := range trailer.Get(ErrorTrailer) {
		var d pb.ErrorDetail
		if proto.Unmarshal([]byte(raw), &d) == nil && d.Code != "" {
			out.Code, out.Message, out.Metadata, out.Diff = d.Code, d.Message, d.Metadata, d.Diff
			return out
		}
	}
	for _, det := range st.Details() {
		if info, ok := det.(*errdetails.ErrorInfo); ok && info.Domain == "journald" && info.Reason != "" {
			out.Code, out.Metadata = info.Reason, info.Metadata
			return out
		}
	}
	if st.Code() == codes.Internal || st.Code() == codes.Unknown {
		return transportFailure(st)
	}
	out.Code = snakeCase(st.Code().String())
	return out
}

// fromDetail is the *Error an ErrorDetail names (a refusal carried in a message, such as a
// Leases stream's `refused`, rather than in a call's trailer).
func fromDetail(d *pb.ErrorDetail) *Error {
	out := &Error{Code: d.GetCode(), Message: d.GetMessage(), Metadata: d.GetMetadata(), Diff: d.GetDiff()}
	if s, ok := Sentinels[d.GetCode()]; ok {
		out.Status = s.Status
	}
	return out
}

// transportFailure is a bare INTERNAL or UNKNOWN: gRPC's own status (a stream reset, a
// connection broken mid-call), never the daemon's, whose edge puts the trailer on every status
// it sends, its own "internal" included. The call may or may not have reached the daemon, as
// after a bare UNAVAILABLE, so it becomes one: writers reconnect and resend the same seqs.
// Other bare statuses (RESOURCE_EXHAUSTED for a request over the cap) would come back the
// same on a retry and keep their own code.
func transportFailure(st *status.Status) *Error {
	return &Error{
		Code:   "unavailable",
		Status: codes.Unavailable,
		Message: "the connection to the journald daemon failed (gRPC " + st.Code().String() +
			" without journald's error trailer: " + st.Message() + "); the call may not have " +
			"reached the daemon: retry it (the writers do), and if it keeps failing check the daemon's log",
		Metadata: map[string]string{"grpc_status": strings.ToUpper(snakeCase(st.Code().String()))},
	}
}

// snakeCase turns a gRPC code name ("FailedPrecondition") into "failed_precondition".
func snakeCase(name string) string {
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
