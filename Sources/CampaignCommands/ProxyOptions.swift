import ArgumentParser
import CampaignTLS
import Foundation

/// `--proxy`, `--proxy-user-env` and `--no-proxy`, for `send` and `feedback`:
/// which HTTP proxy (if any) a connection to the gateway goes through.
struct ProxyOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Reach the gateway through this HTTP proxy (CONNECT): http://[user:password@]host:port. Without it: HTTPS_PROXY (or https_proxy), unless NO_PROXY (or no_proxy) names the gateway; for send --resume, the proxy the send started with.", valueName: "url"))
    var proxy: String?

    @Option(name: .customLong("proxy-user-env"), help: ArgumentHelp("The environment variable holding the proxy's user:password (as curl's --proxy-user); read at every run, never journaled (a --resume reads the same variable).", valueName: "VAR"))
    var proxyUserEnv: String?

    @Flag(name: .customLong("no-proxy"), help: "Connect directly: ignore HTTPS_PROXY and NO_PROXY (and, for send --resume, the proxy the send started with).")
    var noProxy = false

    func validate() throws {
        if noProxy && (proxy != nil || proxyUserEnv != nil) { throw ValidationError("--no-proxy cannot go with --proxy or --proxy-user-env.") }
        if let proxy {
            do { _ = try HTTPProxy(url: proxy) } catch { throw ValidationError("--proxy: \(error.reason).") }
        }
    }

    /// The proxy for connections to `host`, with its credentials, and the
    /// variable they came from: `--proxy`, else the journal's (on a resume),
    /// else the environment's.
    func resolve(gateway host: String, journaled: HTTPProxy? = nil, journaledVariable: String? = nil,
                 environment: [String: String] = Self.processEnvironment) throws -> (proxy: HTTPProxy?, variable: String?) {
        if noProxy { return (nil, nil) }
        var chosen: HTTPProxy?
        var variable = proxyUserEnv
        var fromJournal = false
        if let url = proxy {
            chosen = try HTTPProxy(url: url)
        } else if let journaled {
            (chosen, fromJournal) = (journaled, true)
            variable = variable ?? journaledVariable
        } else {
            do { chosen = try HTTPProxy.fromEnvironment(for: host, environment: environment) } catch {
                throw ValidationError("HTTPS_PROXY: \(error.reason).")
            }
        }
        guard var chosen else { return (nil, nil) }
        if let variable {
            guard let value = environment[variable], value.contains(":") else {
                throw ValidationError("--proxy-user-env \(variable): the variable is not set, or does not hold user:password.")
            }
            chosen.credentials = value
        } else if let credentials = chosen.credentials, !credentials.contains(":") {
            // The journal keeps no password: a send that took it from
            // HTTPS_PROXY finds it there again (the same proxy and user).
            if fromJournal, let again = try? HTTPProxy.fromEnvironment(for: host, environment: environment),
               again.host == chosen.host, again.port == chosen.port, let full = again.credentials,
               full.prefix(while: { $0 != ":" }) == credentials, full.contains(":") {
                chosen.credentials = full
            } else {
                throw ValidationError(fromJournal
                    ? "the send went through \(chosen) with a password the journal does not keep: set HTTPS_PROXY as before, give --proxy again, or --proxy-user-env VAR."
                    : "--proxy \(chosen) names a user but no password: give http://user:password@host:port, or --proxy-user-env VAR.")
            }
        }
        return (chosen, variable)
    }

    static var processEnvironment: [String: String] { ProcessInfo.processInfo.environment }
}
