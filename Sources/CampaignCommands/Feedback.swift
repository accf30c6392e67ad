import ArgumentParser
import Foundation
import APNSWire
import CampaignIO
import CampaignSend
import CampaignTLS
import FeedbackStore
import GatewayClient

/// `campaign feedback`: the feedback service into the suppression store.
struct Feedback: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read the feedback service into the suppression store that plan consults; list or prune the store.",
        discussion: """
        Connects, reads tuples until the service closes, and merges them: one entry \
        per token, the newest timestamp wins. Safe to run twice; a killed run loses \
        nothing it had read (see docs/plan-format.md).
        """
    )

    @Option(help: ArgumentHelp("The suppression store (NDJSON; created 0600 when missing).", valueName: "file"))
    var store: String

    @Option(help: ArgumentHelp("Feedback service address.", valueName: "host:port"))
    var feedback: String?

    @Option(help: ArgumentHelp("sandbox (feedback.sandbox.push.apple.com:2196) or production (feedback.push.apple.com:2196).", valueName: "name"))
    var environment: String?

    @OptionGroup var credentials: CredentialOptions

    @OptionGroup var proxyOptions: ProxyOptions

    @Flag(help: "Print the store as NDJSON {\"token\":\"hex\",\"ts\":UNIX} and exit.")
    var list = false

    @Option(help: ArgumentHelp("Remove entries older than N days (after reading the service, if one is named).", valueName: "N"))
    var pruneDays: Int?

    func validate() throws {
        let contacts = feedback != nil || environment != nil
        if list && (contacts || pruneDays != nil) { throw ValidationError("--list only prints the store; give it alone with --store.") }
        if feedback != nil && environment != nil { throw ValidationError("Give --feedback HOST:PORT or --environment, not both.") }
        if !list && !contacts && pruneDays == nil {
            throw ValidationError("Name the service with --feedback HOST:PORT or --environment sandbox|production (or use --list or --prune-days).")
        }
        if contacts && credentials.cert == nil { throw ValidationError("--cert is required to read the feedback service.") }
        if let f = feedback, GatewayAddress.parse(f) == nil { throw ValidationError("--feedback must be HOST:PORT, not \"\(f)\".") }
        if let e = environment, GatewayAddress.environment(e, feedback: true) == nil { throw ValidationError("--environment must be sandbox or production.") }
        if let d = pruneDays, d < 0 { throw ValidationError("--prune-days must not be negative.") }
    }

    func run() throws {
        do {
            if list {
                let storeValue = try FeedbackStore.load(path: store)
                FileHandleWriter.write(String(decoding: storeValue.serialized(), as: UTF8.self), fd: 1)
                return
            }
            if let address = feedback.flatMap(GatewayAddress.parse) ?? environment.flatMap({ GatewayAddress.environment($0, feedback: true) }) {
                let context = try CredentialOptions.context(cert: credentials.cert!, key: credentials.key, ca: credentials.ca,
                                                            passphrase: credentials.passphrase())
                let proxy = try proxyOptions.resolve(gateway: address.0).proxy
                let result = try FeedbackClient.run(host: address.0, port: address.1, context: context, storePath: store, proxy: proxy)
                printError(result.text)
            }
            if let days = pruneDays {
                let cutoff = UInt32(max(0, Date().timeIntervalSince1970 - Double(days) * 86_400))
                let (removed, count) = try FeedbackStore.update(path: store) { s in (s.prune(olderThan: cutoff), s.count) }
                printError("feedback: pruned \(removed) entries older than \(days) days; the store holds \(count)")
            }
        }
    }
}
