// End-to-end tests of what batchsweep does on a terminal: stdout and stderr each on a pseudo-terminal of
// their own, so colour can be told apart per stream.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "e2e/e2e_support.hpp"

namespace bsw::e2e {
namespace {

// A pseudo-terminal pair: the child writes to `follower`, the test reads `leader`.
struct Pty {
  int leader = -1;
  std::string follower;

  Pty() {
    leader = posix_openpt(O_RDWR | O_NOCTTY);
    if (leader < 0 || grantpt(leader) != 0 || unlockpt(leader) != 0) return;
    follower = ptsname(leader);
  }
  ~Pty() {
    if (leader >= 0) close(leader);
  }
  Pty(const Pty&) = delete;
  Pty& operator=(const Pty&) = delete;
};

// Runs BSW_BINARY with `args`, stdout and stderr on two terminals, NO_COLOR unset, TERM=xterm, then `env`
// added; reads both until it exits.
Result run_on_terminals(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  Pty out, err;
  Result r;
  if (out.follower.empty() || err.follower.empty()) {
    ADD_FAILURE() << "no pseudo-terminal";
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "r", stdin);
    freopen(out.follower.c_str(), "w", stdout);
    freopen(err.follower.c_str(), "w", stderr);
    unsetenv("NO_COLOR");  // the test's own environment decides nothing
    setenv("TERM", "xterm", 1);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    exec_batchsweep(args);
  }
  // Drain both leaders while the child runs (a full terminal buffer would block it); a leader reads EIO once
  // the child has closed its side.
  std::array<pollfd, 2> fds{pollfd{out.leader, POLLIN, 0}, pollfd{err.leader, POLLIN, 0}};
  std::array<std::string*, 2> into{&r.out, &r.err};
  int open_streams = 2;
  while (open_streams > 0 && poll(fds.data(), fds.size(), 10000) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        into[i]->append(buf, static_cast<size_t>(n));
      } else {
        fds[i].fd = -1;
        --open_streams;
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::vector<std::string> sweep() {
  return {"run",     "--backend",  "scripted", "--script",    scripted("roofline.json"),
          "--batch", "8,64",       "--warmup", "1",           "--min-samples",
          "2",       "--min-time", "0",        "--max-noise", "100"};
}

bool colored(const std::string& text) {
  return text.find("\x1b[") != std::string::npos;
}

// no-color.org: NO_COLOR turns colour off only when set and non-empty; the table on stdout and the progress
// line on stderr follow that one rule.
TEST(Terminal, ColourFollowsNoColorOnBothStreams) {
  const Result plain = run_on_terminals(sweep(), {"NO_COLOR=1"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("recommended:"), std::string::npos) << plain.out;
  EXPECT_NE(plain.err.find("batch 64"), std::string::npos) << plain.err;  // the progress line
  EXPECT_FALSE(colored(plain.out)) << plain.out;
  EXPECT_FALSE(colored(plain.err)) << plain.err;
  for (const std::string& no_color : {std::string("NO_COLOR="), std::string("BSW_UNRELATED=1")}) {
    const Result r = run_on_terminals(sweep(), {no_color});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(colored(r.out)) << no_color << "\n" << r.out;
    EXPECT_TRUE(colored(r.err)) << no_color << "\n" << r.err;
  }
}

// TERM=dumb says the terminal shows escape codes as text: no colour there either.
TEST(Terminal, NoColourOnADumbTerminal) {
  const Result r = run_on_terminals(sweep(), {"TERM=dumb"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("recommended:"), std::string::npos) << r.out;
  EXPECT_FALSE(colored(r.out)) << r.out;
  EXPECT_FALSE(colored(r.err)) << r.err;
}

}  // namespace
}  // namespace bsw::e2e
