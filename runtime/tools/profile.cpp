#include "tools/profile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/tensor.h"

namespace fy {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string rate(const char* key, double value) {
  if (!std::isfinite(value) || value <= 0)
    fail(std::string("the measured ") + key + " is " + std::to_string(value) + ", not a positive number");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return json_string(key) + ": " + buf;
}

// errno's text for a failed write of `path`, after removing what was begun.
[[noreturn]] void fail_write(const std::string& path, const std::string& tmp, int fd) {
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!tmp.empty()) ::unlink(tmp.c_str());
  fail("cannot write '" + path + "': " + std::strerror(err));
}

}  // namespace

std::string profile_json(const Profile& p) {
  std::string lines[] = {
      json_string("format") + ": " + json_string("fuyou-profile-1"),
      json_string("target") + ": " + json_string(p.target),
      json_string("device") + ": " + json_string(p.device),
      json_string("matmul_precision") + ": " + json_string(p.matmul_precision),
      rate("matmul_flops_per_s", p.matmul_flops_per_s),
      rate("matmul_n", p.matmul_n),
      rate("matmul_n64_flops_per_s", p.matmul_n64_flops_per_s),
      rate("matmul_n256_flops_per_s", p.matmul_n256_flops_per_s),
      p.matmul_n1024_flops_per_s ? rate("matmul_n1024_flops_per_s", *p.matmul_n1024_flops_per_s) : "",
      p.matmul_n2048_flops_per_s ? rate("matmul_n2048_flops_per_s", *p.matmul_n2048_flops_per_s) : "",
      rate("device_mem_bytes_per_s", p.device_mem_bytes_per_s),
      rate("transcendental_elems_per_s", p.transcendental_elems_per_s),
      rate("softmax_elems_per_s", p.softmax_elems_per_s),
      rate("norm_elems_per_s", p.norm_elems_per_s),
      rate("norm_grad_elems_per_s", p.norm_grad_elems_per_s),
      p.attention_flops_per_s ? rate("attention_flops_per_s", *p.attention_flops_per_s) : "",
      rate("launch_s", p.launch_s),
      rate("h2d_bytes_per_s", p.h2d_bytes_per_s),
      rate("d2h_bytes_per_s", p.d2h_bytes_per_s),
      p.ssd_read_bytes_per_s ? rate("ssd_read_bytes_per_s", *p.ssd_read_bytes_per_s) : "",
      p.ssd_write_bytes_per_s ? rate("ssd_write_bytes_per_s", *p.ssd_write_bytes_per_s) : "",
      rate("adamw_params_per_s", p.adamw_params_per_s),
      p.adamw_alone_params_per_s ? rate("adamw_alone_params_per_s", *p.adamw_alone_params_per_s) : "",
  };
  std::string out = "{";
  const char* sep = "\n  ";
  for (const std::string& line : lines) {
    if (line.empty()) continue;
    out += sep + line;
    sep = ",\n  ";
  }
  return out + "\n}\n";
}

void write_profile(const std::string& named, const Profile& p) {
  const std::string text = profile_json(p);
  // A symbolic link (/dev/stdout) is written where it leads, never replaced.
  std::string path = named;
  struct stat link;
  if (::lstat(named.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    if (char* real = ::realpath(named.c_str(), nullptr)) {
      struct stat st;
      if (::stat(real, &st) == 0) path = real;
      std::free(real);
    }
  // A device or a FIFO (-o /dev/stdout) is written as it is: a rename would
  // put a file in its place.
  struct stat st;
  const bool stream = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  // Else through the same directory as `path`, so the rename cannot cross file systems.
  // (No temporary for a stream: nothing to remove on a failure.)
  const std::string tmp = stream ? std::string() : path + ".tmp." + std::to_string(::getpid());
  int fd = stream ? ::open(path.c_str(), O_WRONLY | O_CLOEXEC)
                  : ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(path, tmp, -1);
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_write(path, tmp, fd);
    done += size_t(n);
  }
  if (stream) {
    ::close(fd);
    return;
  }
  // Durable before it becomes visible: a crash leaves the old file or the new one.
  if (::fsync(fd) != 0) fail_write(path, tmp, fd);
  if (::close(fd) != 0) fail_write(path, tmp, -1);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_write(path, tmp, -1);
}

}  // namespace fy
