import ArgumentParser
import Foundation
import CampaignIO
import CampaignSend
import CampaignTLS
import GatewayClient

/// Flags naming a provider-token key (token authentication), shared by `send` and `channels`.
struct TokenOptions: ParsableArguments {
    @Option(help: ArgumentHelp("A provider-token key (AuthKey_<KEY ID>.p8) instead of --cert (h2 plans and channels); with --key-id and --team-id.", valueName: "file"))
    var authKey: String?

    @Option(help: ArgumentHelp("The --auth-key's 10-character key id.", valueName: "KID"))
    var keyId: String?

    @Option(help: ArgumentHelp("Your 10-character team id, for --auth-key.", valueName: "TEAM"))
    var teamId: String?

    @Option(help: ArgumentHelp("Keep the provider token in this directory, shared by every send, part and machine using the key (one signing per renewal between them), instead of the journal's.", valueName: "dir"))
    var tokenCache: String?

    /// Where the token is kept: `--token-cache DIR`'s file for the key (the
    /// directory made 0700 if needed), else `fallback` (a journal's file, or nil: in memory).
    func tokenCachePath(fallback: String?) throws -> String? {
        guard let dir = tokenCache, let kid = keyId else { return fallback }
        try SecureFile.makeDirectory(dir, mode: 0o700)
        return ProviderTokenSource.sharedCachePath(directory: absolutePath(dir), keyID: kid)
    }

    /// Whether any of the three was given.
    var isGiven: Bool { authKey != nil || keyId != nil || teamId != nil }

    func validate() throws {
        guard isGiven else {
            if tokenCache != nil { throw ValidationError("--token-cache goes with --auth-key, --key-id and --team-id.") }
            return
        }
        guard authKey != nil, let k = keyId, let t = teamId else { throw ValidationError("--auth-key, --key-id and --team-id go together.") }
        for (name, value) in [("--key-id", k), ("--team-id", t)] where value.utf8.count != 10 || !value.utf8.allSatisfy({ (0x41...0x5A).contains($0) || (0x30...0x39).contains($0) }) {
            throw ValidationError("\(name) must be 10 upper-case letters or digits, as Apple's are (the developer account shows it), not \"\(value)\".")
        }
    }
}

/// Flags naming the provider certificate, shared by `send` and `feedback`.
struct CredentialOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Provider certificate: PEM (with --key, or with the key inside), or a PKCS#12 bundle (.p12/.pfx).", valueName: "file"))
    var cert: String?

    @Option(help: ArgumentHelp("Private key (PEM), when it is not in the certificate file.", valueName: "file"))
    var key: String?

    @Option(help: ArgumentHelp("Environment variable holding the key's or bundle's passphrase.", valueName: "VAR"))
    var passphraseEnv: String?

    @Option(help: ArgumentHelp("File whose first line is the passphrase.", valueName: "file"))
    var passphraseFile: String?

    @Option(help: ArgumentHelp("Certificate authorities to trust for the gateway (PEM). Default: the system's store.", valueName: "file"))
    var ca: String?

    func validate() throws {
        if passphraseEnv != nil && passphraseFile != nil {
            throw ValidationError("Give the passphrase with --passphrase-env or --passphrase-file, not both.")
        }
        if let name = passphraseEnv, ProcessInfo.processInfo.environment[name] == nil {
            throw ValidationError("The environment variable \(name) named by --passphrase-env is not set.")
        }
    }

    /// The passphrase, never from the command line itself.
    func passphrase() throws -> String? {
        if let name = passphraseEnv { return ProcessInfo.processInfo.environment[name] }
        if let path = passphraseFile {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw TLSError(.fileUnreadable(path: path, reason: "cannot be read as text"))
            }
            return Self.firstLine(of: text)
        }
        return nil
    }

    /// The first line of a passphrase file, without its line ending: LF, or
    /// CR LF as a file saved on Windows has it (by bytes: Swift reads CR LF
    /// as one character).
    static func firstLine(of text: String) -> String {
        var line = text.utf8.split(separator: 0x0A, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        while line.last == 0x0D { line = line.dropLast() }
        return String(decoding: line, as: UTF8.self)
    }

    /// A client context presenting the certificate and trusting `ca` (or the system store).
    /// With `http2`, the context offers ALPN h2, and `cert` may be empty
    /// (token authentication presents no certificate).
    static func context(cert: String, key: String?, ca: String?, passphrase: String?, http2: Bool = false) throws -> TLSContext {
        let lower = cert.lowercased()
        let identity = cert.isEmpty && http2 ? nil
            : lower.hasSuffix(".p12") || lower.hasSuffix(".pfx")
            ? try TLSIdentity.pkcs12(path: cert, passphrase: passphrase)
            : try TLSIdentity.pem(certificate: cert, key: key, passphrase: passphrase)
        return try TLSContext.client(identity: identity, trust: ca.map { .file($0) } ?? .system, http2: http2)
    }
}

/// Where the gateway is: `--gateway HOST:PORT` or `--environment`.
enum GatewayAddress {
    static func parse(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    /// The HTTP/2 provider API's hosts.
    static func http2Environment(_ name: String) -> (String, Int)? {
        switch name {
        case "production": ("api.push.apple.com", 443)
        case "sandbox": ("api.sandbox.push.apple.com", 443)
        default: nil
        }
    }

    static func environment(_ name: String, feedback: Bool) -> (String, Int)? {
        switch name {
        case "production": feedback ? ("feedback.push.apple.com", 2196) : ("gateway.push.apple.com", 2195)
        case "sandbox": feedback ? ("feedback.sandbox.push.apple.com", 2196) : ("gateway.sandbox.push.apple.com", 2195)
        default: nil
        }
    }
}
