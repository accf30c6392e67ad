import ArgumentParser
import Foundation
import CampaignJSON

/// `campaign doctor`: the night's set-up checked before the night.
struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a send's set-up before the night: credentials, job and plan, directories, the route to the gateway.",
        discussion: """
        One line per check (ok, warning or failed, one sentence each). Exit 0 when \
        nothing failed; else the first failure's class: 69 the route (DNS, TCP, the \
        proxy's tunnel), 77 credentials (trust, an expired certificate, a refused \
        key), 65 the job or plan (a topic that is not the certificate's), 73 a \
        directory (too little space for the plan, a ledger that cannot be written).
        """
    )

    @Option(help: ArgumentHelp("The gateway as HOST:PORT.", valueName: "host:port"))
    var gateway: String?

    @Option(help: ArgumentHelp("Apple's HTTP/2 provider API: sandbox or production.", valueName: "name"))
    var environment: String?

    @OptionGroup var credentials: CredentialOptions
    @OptionGroup var proxyOptions: ProxyOptions
    @OptionGroup var token: TokenOptions

    @Option(help: ArgumentHelp("The job to check (and its topic against the certificate's).", valueName: "file"))
    var job: String?

    @Option(help: ArgumentHelp("The plan to send (its size against the journal's free space; a throttle's duration).", valueName: "file"))
    var plan: String?

    @Option(help: ArgumentHelp("The manifest of the parts to send, instead of --plan.", valueName: "file"))
    var manifest: String?

    @Option(help: ArgumentHelp("Where the send's journal goes: its file system must hold the plan (a piped plan is spooled there).", valueName: "dir"))
    var journal: String?

    @Option(help: ArgumentHelp("The app's send ledger: it must be a directory this user can read and write.", valueName: "dir"))
    var ledger: String?

    @Option(help: ArgumentHelp("The app's bundle id, for --probe when no --job or --plan names it (token authentication needs it).", valueName: "topic"))
    var topic: String?

    @Flag(help: "Send one request to a device token that cannot exist: APNs answers it about the credentials alone (400 BadDeviceToken: taken; 403: refused, with why).")
    var probe = false

    @Flag(help: "Print JSON instead of text.")
    var json = false

    @Option(help: .hidden)
    var assumeFreeBytes: Int64?

    func validate() throws {
        guard (gateway == nil) != (environment == nil) else {
            throw ValidationError("Give exactly one of --gateway HOST:PORT or --environment sandbox|production.")
        }
        if let g = gateway, GatewayAddress.parse(g) == nil { throw ValidationError("--gateway must be HOST:PORT, not \"\(g)\".") }
        if let e = environment, GatewayAddress.http2Environment(e) == nil { throw ValidationError("--environment must be sandbox or production.") }
        if credentials.cert == nil && token.authKey == nil { throw ValidationError("--cert (or --auth-key) is required: the credentials the send will use.") }
        if plan != nil && manifest != nil { throw ValidationError("Give --plan or --manifest, not both.") }
    }

    func run() throws {
        try reportingErrors(as: "doctor") {
            let (host, port) = gateway.flatMap(GatewayAddress.parse) ?? GatewayAddress.http2Environment(environment!)!
            let proxy = try proxyOptions.resolve(gateway: host).proxy
            var input = DoctorInput(host: host, port: port, proxy: proxy)
            input.certificate = credentials.cert
            input.key = credentials.key
            input.passphrase = try credentials.passphrase()
            input.ca = credentials.ca
            (input.authKey, input.keyID, input.teamID) = (token.authKey, token.keyId, token.teamId)
            input.tokenCache = token.tokenCache.map(absolutePath)
            (input.job, input.plan, input.manifest, input.journal, input.ledger) = (job, plan, manifest, journal, ledger)
            input.probe = probe
            input.topic = topic
            input.freeBytes = assumeFreeBytes
            let checks = DoctorChecks.run(input)
            if json {
                print(String(decoding: JSONValue.array(checks.map(\.json)).serialized(), as: UTF8.self))
            } else {
                let width = checks.map(\.name.count).max() ?? 0
                for c in checks {
                    print("\(c.status.rawValue.padding(toLength: 7, withPad: " ", startingAt: 0)) \(c.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(c.sentence)")
                }
            }
            if let failure = checks.first(where: { $0.status == .failed }), let code = failure.failureClass {
                throw ExitCode(code.rawValue)
            }
        }
    }
}
