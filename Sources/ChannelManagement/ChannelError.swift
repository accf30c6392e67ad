import APNSWire
import CampaignIO
import CampaignTLS

/// Why `campaign channels` stopped: one sentence that names what to do, and
/// the sysexits code the README gives it. Each APNs refusal is classed by
/// `apns-broadcast.md` §3 (``Broadcast/AnswerClass``).
public struct ChannelError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: Equatable, Sendable {
        /// APNs answered with an error status.
        case refused(operation: ChannelOperation, status: Int, reason: APNsReason?)
        /// A transient failure (429, 5xx, a lost connection, silence) lasted through every retry.
        case gaveUp(operation: ChannelOperation, attempts: Int, last: String)
        /// A create went unanswered (the connection lost, or silent) more
        /// times in a row than a request is tried: it may have made channels.
        case unanswered(operation: ChannelOperation, why: String)
        /// The connection could not be made, or TLS refused it.
        case connection(TLSError)
        /// The server answered something the management API never does.
        case unexpectedAnswer(String, String)
        /// A signal stopped the command.
        case stopped
        /// An input (a channel id on the command line, `--from`) is unusable.
        case badInput(String)
        /// A `--from` CSV without the column of channel ids: the README's
        /// "no channel id column" of any input (66), not a bad id (65).
        case missingColumn(String)
        /// The `--from` file cannot be read.
        case unreadableInput(IOError)
        /// The `--out` file cannot be opened or written.
        case output(IOError)
    }

    public var kind: Kind
    /// The `apns-request-id` of the answer, to quote to Apple.
    public var requestID: String?
    /// The server the request went to (`host:port`), to name it in the sentence.
    public var gateway: String?

    public init(_ kind: Kind, requestID: String? = nil) { (self.kind, self.requestID) = (kind, requestID) }

    /// What happened, and the answer it was: the server's name is context for the sentence, not part of the error.
    public static func == (a: ChannelError, b: ChannelError) -> Bool { a.kind == b.kind && a.requestID == b.requestID }

    /// The class of an APNs refusal (nil for other failures).
    public var answerClass: Broadcast.AnswerClass? {
        guard case .refused(_, let status, let reason) = kind else { return nil }
        return Broadcast.AnswerClass(status: status, reason: reason)
    }

    /// sysexits(3): 65 the request or input is wrong, 66 an input is missing
    /// (a file, or the channel `show` names), 69 APNs cannot do it now (account
    /// state, the server's trouble, unreachable), 73/74 the output, 75 stopped
    /// by a signal, 77 credentials.
    public var exitCode: Int32 {
        switch kind {
        case .refused(_, let status, let reason):
            switch Broadcast.AnswerClass(status: status, reason: reason) {
            case .requestWrong: return 65
            case .credentials: return 77
            case .accountState, .transient: return 69
            case .channelGone: return 66
            }
        case .gaveUp, .unexpectedAnswer, .unanswered: return 69
        case .connection(let e): return e.isCredentialOrTrustFailure ? 77 : 69
        case .stopped: return 75
        case .badInput: return 65
        case .missingColumn: return 66
        case .unreadableInput: return 66
        case .output(let e): return e.errno.map { [ENOSPC, EIO, EDQUOT, EROFS].contains($0) } ?? false ? 74 : 73
        }
    }

    public var description: String {
        let quoted = requestID.map { " (apns-request-id \($0))" } ?? ""
        switch kind {
        case .refused(let operation, let status, let reason):
            let answer = "\(status) \(reason?.name ?? "(no reason)")"
            return "APNs refused to \(operation.what) with \(answer)\(quoted): \(Self.advice(operation: operation, status: status, reason: reason))."
        case .gaveUp(let operation, let attempts, let last):
            return "Could not \(operation.what) after \(attempts) attempts (last: \(last))\(quoted): APNs is in trouble or unreachable; run the command again later."
        case .unanswered(let operation, let why):
            return "A request to \(operation.what) went unanswered (\(why)) as many times as a request is tried: run the command again later; `campaign channels list` shows every channel, those this run found included."
        case .connection(let e):
            return "\(Self.withoutFinalStop(e.description))\(e.isCredentialOrTrustFailure ? "" : ": check --gateway or --environment, and --proxy")."
        case .unexpectedAnswer(let what, let answer):
            let server = gateway.map { "The server at \($0)" } ?? "The gateway"
            return "\(server) answered a request to \(what) with \(answer)\(quoted), which the channel management API never does: check --gateway (--environment names Apple's)."
        case .stopped:
            return "Stopped by a signal; what was done is printed above."
        case .badInput(let what), .missingColumn(let what):
            return what
        case .unreadableInput(let e), .output(let e):
            return e.description
        }
    }

    private static func withoutFinalStop(_ text: String) -> String { text.hasSuffix(".") ? String(text.dropLast()) : text }

    /// What to do about a refusal: by reason, else by class.
    package static func advice(operation: ChannelOperation, status: Int, reason: APNsReason?) -> String {
        switch reason {
        case .cannotCreateChannelConfig?:
            return "the app has reached its limit of channels in this environment (10,000 at Apple); delete channels whose events are over (`campaign channels list`, then `campaign channels delete`)"
        case .featureNotEnabled?:
            return "broadcast push is not enabled for this app; turn on the Broadcast capability for its App ID (Push Notifications) on developer.apple.com"
        case .channelNotRegistered?:
            return "no such channel in this environment (never created, deleted, or made in the other environment); `campaign channels list` shows the live ones"
        case .topicDisallowed?:
            return "--bundle-id must be the app's bundle id alone, without a suffix such as .push-type.liveactivity"
        case .topicMismatch?:
            return "the token's team or the certificate does not cover this --bundle-id; use the credentials of the app's team"
        case .missingProviderToken?:
            return "the server wants a provider token (a --cert, if given, was not taken as one): give --auth-key with --key-id and --team-id"
        case .expiredProviderToken?:
            return "the token's time is more than an hour off APNs' clock; check this machine's clock"
        case .invalidProviderToken?:
            return "the token was not accepted; check that --key-id names --auth-key's key and --team-id its team"
        case .badCertificate?, .badCertificateEnvironment?:
            return "the certificate is not valid for this environment; use the app's push certificate for --environment, or --auth-key"
        case .tooManyProviderTokenUpdates?:
            return "a new token came too soon after the last; wait 20 minutes and run the command again"
        case .badChannelId?, .missingChannelId?:
            return "the channel id is not one APNs issued; give the id exactly as `campaign channels create` or `list` printed it"
        default:
            switch Broadcast.AnswerClass(status: status, reason: reason) {
            case .credentials: return "the credentials were refused; check --auth-key, --key-id and --team-id, or --cert"
            case .transient: return "APNs is in trouble; run the command again later"
            case .accountState: return "the app's broadcast settings at Apple do not allow it; check the App ID on developer.apple.com"
            case .channelGone: return "the channel is gone"
            case .requestWrong: return "the request is wrong (is --gateway the channel management API, and --bundle-id the app's?); report it if it persists"
            }
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
