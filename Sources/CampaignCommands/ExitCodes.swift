import ArgumentParser
import AudienceIngest
import CampaignIO
import CampaignPayload
import CampaignPlan
import PlanStream
import SendLedger
import CampaignSend
import CampaignResults
import CampaignTLS
import GatewaySimulator
import SendJournal
import ChannelManagement

/// Exit codes, as documented in README.md. They follow sysexits(3) where one fits.
public enum CampaignExit {
    /// Everything done.
    public static let success = ExitCode(0)
    /// A failure not covered below.
    public static let failure = ExitCode(1)
    /// Wrong arguments (ArgumentParser's validation errors use it too).
    public static let usage = ExitCode(64)
    /// The plan had no trailer (cut short upstream): what it held was sent.
    public static let incompletePlan = ExitCode(65)
    /// An input file is unusable: missing, malformed, or of the wrong kind.
    public static let unusableInput = ExitCode(66)
    /// The gateway stayed unreachable; the send can be resumed.
    public static let unavailable = ExitCode(69)
    /// An output cannot be created: it exists and would be replaced, or the directory refuses it.
    public static let cannotCreate = ExitCode(73)
    /// A system I/O error: a full disk, a failing device.
    public static let ioError = ExitCode(74)
    /// Stopped by a signal, or the journal is busy with another send: try again (resume) later.
    public static let interrupted = ExitCode(75)
    /// A certificate, key, passphrase or trust problem: retrying will not help.
    public static let credentials = ExitCode(77)
}

/// The one mapping of errors to exit codes, for every subcommand: prints
/// `error` as one sentence after `campaign COMMAND:` and returns the code
/// README.md gives it. An ``ExitCode`` passes through, unprinted.
func exitCode(for error: Error, command: String) -> ExitCode {
    if let code = error as? ExitCode { return code }
    printError("campaign \(command): \(error)")
    switch error {
    case let e as ChannelError:
        return ExitCode(e.exitCode)
    case let e as ResultsError:
        return ExitCode(e.exitCode)
    case let e as TLSError:
        // Anything else a TLS step refuses is the far end or the network.
        return e.isCredentialOrTrustFailure ? CampaignExit.credentials : CampaignExit.unavailable
    case let e as PlanError:
        return e.reason == .noTrailer ? CampaignExit.incompletePlan : CampaignExit.unusableInput
    case is ScheduleRefusal:
        return CampaignExit.incompletePlan
    case let e as JournalError where e.isBusy:
        return CampaignExit.interrupted
    case let e as JournalError where e.reason == .alreadyExists:
        // An output that would replace what it must not: a journal's record of what was sent.
        return CampaignExit.cannotCreate
    case let e as IOError where e.errno.map { [ENOSPC, EIO, EDQUOT, EROFS].contains($0) } ?? false:
        return CampaignExit.ioError
    case let e as LedgerError where e.writing:
        return e.errno.map { [ENOSPC, EIO, EDQUOT, EROFS].contains($0) } ?? false ? CampaignExit.ioError : CampaignExit.cannotCreate
    case is LedgerError:
        return CampaignExit.unusableInput
    case is JournalError, is IOError, is JobError, is AudienceError, is SimulatorInputError:
        return CampaignExit.unusableInput
    case is ValidationError:
        // A usage error found only once the plan or journal was read (an
        // unset --proxy-user-env variable, a certificate an h2 plan lacks).
        return CampaignExit.usage
    default:
        return CampaignExit.failure
    }
}

/// Runs a subcommand's body, turning any error into its exit code (``exitCode(for:command:)``).
@discardableResult
func reportingErrors<T>(as command: String, _ body: () throws -> T) throws -> T {
    do { return try body() } catch { throw exitCode(for: error, command: command) }
}

/// Writes a command's output file, or standard output for `-` (every output
/// option takes `-`): files atomically, with `mode`.
func writeOutput(_ bytes: [UInt8], to path: String, mode: mode_t = SecureFile.publicMode) throws {
    if path == "-" {
        FileHandleWriter.write(String(decoding: bytes, as: UTF8.self), fd: 1)
    } else {
        try SecureFile.write(bytes, to: path, mode: mode)
    }
}

/// Prints one line to standard error.
func printError(_ message: String) {
    // One write with its newline: print(_:to:) writes the newline apart,
    // and another thread's line (a connection's, at a stop) came between.
    FileHandleWriter.write(message + "\n", fd: 2)
}

enum FileHandleWriter {
    static func write(_ string: String, fd: Int32) {
        var bytes = Array(string.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { raw in
                #if canImport(Glibc)
                Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                #else
                Darwin.write(fd, raw.baseAddress! + offset, raw.count - offset)
                #endif
            }
            if n <= 0 { return }
            offset += n
        }
    }
}

#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif
