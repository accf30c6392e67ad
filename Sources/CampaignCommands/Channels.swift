import ArgumentParser
import APNSWire
import CampaignIO
import CampaignSend
import CampaignTLS
import GatewayClient
import ChannelManagement

/// `campaign channels`: broadcast channels (iOS 18 Live Activities) over the
/// channel management API. Lists its subcommands; each is a file of its own.
struct Channels: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create, list, show and delete broadcast channels (Live Activities, iOS 18) with the channel management API.",
        discussion: """
        Channel ids go to standard output, one per line; each answer's \
        apns-request-id goes to standard error. Exit codes: 0 done (a delete of a \
        channel already gone included), 64 usage, 65 a request or input APNs or \
        campaign refuses as wrong, 66 an input missing (a --from file; the \
        channel `show` names), 69 APNs cannot now (the 10,000-channel limit, \
        broadcast not enabled for the app, the server's trouble after retries, \
        unreachable), 73/74 --out cannot be written, 75 stopped by a signal, \
        77 credentials.
        """,
        subcommands: [ChannelsCreate.self, ChannelsList.self, ChannelsShow.self, ChannelsDelete.self]
    )
}

/// Where the management API is and how to authenticate, shared by every `channels` subcommand.
struct ChannelOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The app's bundle id, without a suffix (not .push-type.liveactivity).", valueName: "id"))
    var bundleId: String

    @Option(help: ArgumentHelp("sandbox (api-manage-broadcast.sandbox.push.apple.com:2195) or production (api-manage-broadcast.push.apple.com:2196): channels of one do not exist in the other.", valueName: "name"))
    var environment: String?

    @Option(help: ArgumentHelp("The management API's address instead (the simulator's --management-port).", valueName: "host:port"))
    var gateway: String?

    @OptionGroup var credentials: CredentialOptions

    @OptionGroup var proxyOptions: ProxyOptions

    @OptionGroup var token: TokenOptions

    @Option(help: ArgumentHelp("How long an answer may take before the request counts as lost and is tried again; also the connection's limit, at most 10.", valueName: "s"))
    var answerTimeout: Double = 30

    func validate() throws {
        // Exactly one, as for send: a channel made in the wrong environment is one the app never finds.
        guard (gateway == nil) != (environment == nil) else {
            throw ValidationError("Give exactly one of --gateway HOST:PORT or --environment sandbox|production.")
        }
        if let g = gateway, GatewayAddress.parse(g) == nil { throw ValidationError("--gateway must be HOST:PORT, not \"\(g)\".") }
        if let e = environment, Broadcast.managementGateway(environment: e) == nil || e == "development" {
            throw ValidationError("--environment must be sandbox or production.")
        }
        if bundleId.isEmpty || bundleId.contains("/") || bundleId.contains(where: { $0 == " " || !$0.isASCII }) {
            throw ValidationError("--bundle-id must be an app's bundle id (com.example.app), not \"\(bundleId)\".")
        }
        if token.isGiven {
            if credentials.cert != nil { throw ValidationError("Give --auth-key or --cert, not both.") }
        } else if credentials.cert == nil {
            throw ValidationError("--auth-key (with --key-id and --team-id) or --cert is required.")
        }
        if !(0.5...3600).contains(answerTimeout) { throw ValidationError("--answer-timeout must be between 0.5 and 3600 seconds.") }
    }

    /// A client for the chosen gateway and credentials; nothing is sent yet.
    func client(stop: CancellationPipe, command: String) throws -> ChannelManagementClient {
        let (host, port) = gateway.flatMap(GatewayAddress.parse) ?? Broadcast.managementGateway(environment: environment!)!
        let cache = try token.tokenCachePath(fallback: nil)
        let tokens = try token.authKey.map { try ProviderTokenSource(keyPath: $0, keyID: token.keyId!, teamID: token.teamId!, cachePath: cache) }
        let context = try CredentialOptions.context(cert: credentials.cert ?? "", key: credentials.key, ca: credentials.ca,
                                                    passphrase: credentials.passphrase(), http2: true)
        var configuration = ChannelManagementClient.Configuration(host: host, port: port, bundleID: bundleId,
                                                                  proxy: try proxyOptions.resolve(gateway: host).proxy)
        configuration.answerTimeoutSeconds = answerTimeout
        configuration.connectTimeoutSeconds = min(10, answerTimeout)
        return ChannelManagementClient(configuration: configuration, context: context, tokens: tokens, stop: stop,
                                       log: { printError("campaign channels \(command): \($0)") })
    }

    /// Runs `body` with a client, the first SIGINT or SIGTERM asking it to
    /// stop (a request in flight gets its answer for a few seconds, then the
    /// command ends with 75) and a second ending the process at once; errors
    /// become their one sentence and exit code.
    func run(_ command: String, _ body: (ChannelManagementClient) throws -> Void) throws {
        try reportingErrors(as: "channels \(command)") {
            let stop = try CancellationPipe()
            let signals = SignalWatcher(signals: [SIGINT, SIGTERM], handler: SignalEscalation(
                notice: { "campaign channels \(command): stopping (a request in flight, if any, gets its answer first; signal again to exit at once)" },
                first: { stop.cancel() }).handle)
            defer { signals.cancel() }
            let client = try client(stop: stop, command: command)
            defer { client.close() }
            try body(client)
        }
    }
}

/// One line on standard output, written at once (ids must reach a pipe as they come, not when a buffer fills).
func printOutput(_ line: String) {
    FileHandleWriter.write(line + "\n", fd: 1)
}

/// " (apns-request-id X)", for the lines on standard error.
func requestNote(_ id: String?) -> String { id.map { " (apns-request-id \($0))" } ?? "" }

/// Channel ids given on the command line, checked before anything is sent.
func channelIDs(_ texts: [String]) throws -> [ChannelID] {
    try texts.enumerated().map { index, text in
        guard let id = ChannelID(base64: text) else {
            let shown = text.count > 40 ? text.prefix(40) + "…" : text[...]
            throw ChannelError(.badInput("The channel id \"\(shown)\" (argument \(index + 1)) is \(ChannelID.problem(with: text)?.description ?? "not base64"): give it exactly as create or list printed it."))
        }
        return id
    }
}

#if canImport(Glibc)
import Glibc
#endif
