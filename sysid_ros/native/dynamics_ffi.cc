// Batched forward dynamics of a kinematic tree on the CPU, as XLA FFI custom calls.
//
// The CPU path of `sysid_ros.core.dynamics.native` (issue 18): Pinocchio's articulated-body
// algorithm and the reverse mode of it from Pinocchio's RNEA derivatives (Carpentier & Mansard
// 2018) and body regressors, run particle by particle over a batch split across threads, with
// per-particle inertial parameters, joint placements and armature. The tree (parents, joint
// types and axes, gravity) arrives as call attributes; the JAX wrapper fixes the conventions:
//   q, qd, tau, qdd, g: (B, nv); inertial: (B, nb, 10) [m, mc, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]
//   about the joint frame (Pinocchio's dynamic parameters); placement: (B, nb, 12) each joint
//   frame in its parent's, rotation (row-major 3x3) then translation [m]; armature: (B, nb).
//   float64 only.
//
// Built (`make .venv`: python -m sysid_ros.io.native) and loaded by sysid_ros/io/native.py.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pinocchio/algorithm/aba.hpp"
#include "pinocchio/algorithm/kinematics.hpp"
#include "pinocchio/algorithm/regressor.hpp"
#include "pinocchio/algorithm/rnea-derivatives.hpp"
#include "pinocchio/multibody.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The static structure of a tree, as passed in the call's attributes.
struct Tree {
  ffi::Span<const int64_t> parents;    // (nb,) parent body, -1 for the base
  ffi::Span<const int64_t> prismatic;  // (nb,) 1 for a prismatic joint, 0 for a revolute one
  ffi::Span<const double> axis;        // (3 nb,) unit joint axes in the joint frames
  ffi::Span<const double> gravity;     // (3,) world gravity [m/s^2]
};

// Rejects attributes that do not describe a tree whose bodies come after their parents.
ffi::Error CheckTree(const Tree& tree) {
  const size_t nb = tree.parents.size();
  if (nb == 0 || tree.prismatic.size() != nb || tree.axis.size() != 3 * nb ||
      tree.gravity.size() != 3) {
    return ffi::Error::InvalidArgument("sysid dynamics: inconsistent tree attributes");
  }
  for (size_t i = 0; i < nb; ++i) {
    if (tree.parents[i] < -1 || tree.parents[i] >= static_cast<int64_t>(i)) {
      return ffi::Error::InvalidArgument("sysid dynamics: a parent must precede its body");
    }
  }
  return ffi::Error::Success();
}

// A 1-DoF joint about/along `axis`: the axis-aligned joint type where the axis is a
// coordinate axis (cheaper motion subspace), otherwise the unaligned one.
pinocchio::JointModel MakeJoint(bool prismatic, const double* axis) {
  for (int k = 0; k < 3; ++k) {
    const bool unit = axis[k] == 1.0 && axis[(k + 1) % 3] == 0.0 && axis[(k + 2) % 3] == 0.0;
    if (!unit) continue;
    if (prismatic) {
      if (k == 0) return pinocchio::JointModelPX();
      if (k == 1) return pinocchio::JointModelPY();
      return pinocchio::JointModelPZ();
    }
    if (k == 0) return pinocchio::JointModelRX();
    if (k == 1) return pinocchio::JointModelRY();
    return pinocchio::JointModelRZ();
  }
  const Eigen::Vector3d a(axis[0], axis[1], axis[2]);
  if (prismatic) return pinocchio::JointModelPrismaticUnaligned(a);
  return pinocchio::JointModelRevoluteUnaligned(a);
}

// A Pinocchio model of the tree with placeholder placements and inertias (Worker::Set fills
// them); joint i of ours is Pinocchio's joint i + 1, nq = nv = nb.
pinocchio::Model BuildModel(const Tree& tree) {
  pinocchio::Model model;
  model.gravity.linear(Eigen::Vector3d(tree.gravity[0], tree.gravity[1], tree.gravity[2]));
  for (size_t i = 0; i < tree.parents.size(); ++i) {
    const auto parent = static_cast<pinocchio::JointIndex>(tree.parents[i] + 1);
    const auto joint = model.addJoint(parent, MakeJoint(tree.prismatic[i] != 0, &tree.axis[3 * i]),
                                      pinocchio::SE3::Identity(), "j" + std::to_string(i));
    model.appendBodyToJoint(joint, pinocchio::Inertia::Identity(), pinocchio::SE3::Identity());
  }
  return model;
}

// One thread's copy of the model and its data; the thread writes particle after particle into
// the model. Placements are rewritten only where they differ from the last particle's (a batch
// often shares them).
class Worker {
 public:
  explicit Worker(const pinocchio::Model& prototype)
      : model(prototype),
        data(model),
        placement_(12 * (prototype.njoints - 1), std::numeric_limits<double>::quiet_NaN()) {}

  // Writes one particle's placement (nb, 12): rotation (row-major) and translation of each
  // joint frame in its parent's; inertial (nb, 10) and armature (nb,).
  void Set(const double* placement, const double* inertial, const double* armature) {
    const int nb = model.njoints - 1;
    if (!std::equal(placement_.begin(), placement_.end(), placement)) {
      std::copy(placement, placement + 12 * nb, placement_.begin());
      for (int i = 0; i < nb; ++i) {
        const double* x = placement + 12 * i;
        model.jointPlacements[i + 1] = pinocchio::SE3(
            Eigen::Map<const Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(x),
            Eigen::Map<const Eigen::Vector3d>(x + 9));
      }
    }
    for (int i = 0; i < nb; ++i) {
      model.inertias[i + 1] = pinocchio::Inertia::FromDynamicParameters(
          Eigen::Map<const Eigen::Matrix<double, 10, 1>>(inertial + 10 * i));
      model.armature[i] = armature[i];
    }
  }

  pinocchio::Model model;
  pinocchio::Data data;

 private:
  std::vector<double> placement_;
};

// Idle workers by tree, kept between calls: a rollout calls the kernels once per step, and
// building a model, copying it and allocating its data cost more than a small batch's dynamics.
class WorkerCache {
 public:
  std::unique_ptr<Worker> Acquire(const Tree& tree) {
    const std::string key = Key(tree);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& idle = idle_[key];
      if (!idle.empty()) {
        std::unique_ptr<Worker> worker = std::move(idle.back());
        idle.pop_back();
        return worker;
      }
    }
    return std::make_unique<Worker>(BuildModel(tree));
  }

  void Release(const Tree& tree, std::unique_ptr<Worker> worker) {
    const std::string key = Key(tree);
    std::lock_guard<std::mutex> lock(mutex_);
    idle_[key].push_back(std::move(worker));
  }

 private:
  template <typename T>
  static void Append(std::string& key, ffi::Span<const T> values) {
    const size_t size = values.size();
    key.append(reinterpret_cast<const char*>(&size), sizeof(size));
    key.append(reinterpret_cast<const char*>(values.begin()), size * sizeof(T));
  }

  static std::string Key(const Tree& tree) {
    std::string key;
    Append(key, tree.parents);
    Append(key, tree.prismatic);
    Append(key, tree.axis);
    Append(key, tree.gravity);
    return key;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<Worker>>> idle_;
};

WorkerCache& Cache() {
  static WorkerCache* cache = new WorkerCache();  // never destroyed: no exit-order hazards
  return *cache;
}

// Runs body(worker, data, begin, end) on `threads` threads over [0, batch), each with its own
// worker (model and data, from the cache). Small batches stay on the calling thread.
template <typename Body>
void ParallelFor(const Tree& tree, int64_t batch, int64_t threads, Body body) {
  constexpr int64_t kMinPerThread = 16;
  threads = std::max<int64_t>(1, std::min(threads, batch / kMinPerThread));
  auto run = [&](int64_t begin, int64_t end) {
    std::unique_ptr<Worker> worker = Cache().Acquire(tree);
    body(*worker, worker->data, begin, end);
    Cache().Release(tree, std::move(worker));
  };
  std::vector<std::thread> workers;
  const int64_t chunk = (batch + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = t * chunk, end = std::min(batch, begin + chunk);
    if (begin < end) workers.emplace_back(run, begin, end);
  }
  run(0, std::min(batch, chunk));
  for (auto& worker : workers) worker.join();
}

using Vec = Eigen::Map<const Eigen::VectorXd>;
using OutVec = Eigen::Map<Eigen::VectorXd>;

// Checks that every batched operand holds `batch` rows of the expected width.
ffi::Error CheckBatch(int64_t batch, int64_t nb, size_t states, size_t inertial,
                      size_t placement, size_t armature) {
  const size_t b = static_cast<size_t>(batch), n = static_cast<size_t>(nb);
  if (states != b * n || inertial != 10 * b * n || placement != 12 * b * n || armature != b * n) {
    return ffi::Error::InvalidArgument(
        "sysid dynamics: operands must share one batch shape (vmap_method='broadcast_all')");
  }
  return ffi::Error::Success();
}

using F64 = ffi::Buffer<ffi::F64>;
using F64Out = ffi::ResultBuffer<ffi::F64>;

// qdd = ABA(q, qd, tau) per particle.
ffi::Error AbaImpl(F64 q, F64 qd, F64 tau, F64 inertial, F64 placement, F64 armature,
                   F64Out qdd, ffi::Span<const int64_t> parents,
                   ffi::Span<const int64_t> prismatic, ffi::Span<const double> axis,
                   ffi::Span<const double> gravity, int64_t num_threads) {
  const Tree tree{parents, prismatic, axis, gravity};
  if (auto error = CheckTree(tree); error.failure()) return error;
  const int64_t nb = static_cast<int64_t>(parents.size());
  const int64_t batch = static_cast<int64_t>(q.element_count()) / nb;
  if (auto error = CheckBatch(batch, nb, q.element_count(), inertial.element_count(),
                              placement.element_count(), armature.element_count());
      error.failure()) {
    return error;
  }
  if (qd.element_count() != q.element_count() || tau.element_count() != q.element_count()) {
    return ffi::Error::InvalidArgument("sysid dynamics: q, qd, tau differ in size");
  }
  ParallelFor(tree, batch, num_threads,
              [&](Worker& worker, pinocchio::Data& data, int64_t begin, int64_t end) {
    const pinocchio::Model& model = worker.model;
    for (int64_t b = begin; b < end; ++b) {
      worker.Set(placement.typed_data() + 12 * nb * b, inertial.typed_data() + 10 * nb * b,
                 armature.typed_data() + nb * b);
      OutVec(qdd->typed_data() + nb * b, nb) = pinocchio::aba(
          model, data, Vec(q.typed_data() + nb * b, nb), Vec(qd.typed_data() + nb * b, nb),
          Vec(tau.typed_data() + nb * b, nb), pinocchio::Convention::LOCAL);
    }
  });
  return ffi::Error::Success();
}

// Reverse mode of qdd = ABA(q, qd, tau; inertial, armature) for a cotangent g of qdd, from
// d qdd = M^-1 (d tau - d RNEA(q, qd, qdd)) (Carpentier & Mansard 2018) with lambda = M^-1 g:
//   q_bar = -(d RNEA/d q)^T lambda, qd_bar = -(d RNEA/d qd)^T lambda, tau_bar = lambda,
//   armature_bar_i = -lambda_i qdd_i, and inertial_bar_j = -Phi_j(v_j, a_j)^T w_j: RNEA is
//   sum_j J_j^T Phi_j pi_j, so lambda^T RNEA = sum_j w_j^T Phi_j pi_j, where w_j is body j's
//   velocity when the joint rates are lambda and Phi_j its body regressor (Pinocchio's
//   `bodyRegressor`, a_j with gravity). qdd comes from the forward pass.
ffi::Error AbaVjpImpl(F64 q, F64 qd, F64 qdd_in, F64 inertial, F64 placement, F64 armature,
                      F64 g, F64Out q_bar, F64Out qd_bar, F64Out tau_bar, F64Out inertial_bar,
                      F64Out armature_bar, ffi::Span<const int64_t> parents,
                      ffi::Span<const int64_t> prismatic, ffi::Span<const double> axis,
                      ffi::Span<const double> gravity, int64_t num_threads) {
  const Tree tree{parents, prismatic, axis, gravity};
  if (auto error = CheckTree(tree); error.failure()) return error;
  const int64_t nb = static_cast<int64_t>(parents.size());
  const int64_t batch = static_cast<int64_t>(q.element_count()) / nb;
  if (auto error = CheckBatch(batch, nb, q.element_count(), inertial.element_count(),
                              placement.element_count(), armature.element_count());
      error.failure()) {
    return error;
  }
  if (qd.element_count() != q.element_count() || qdd_in.element_count() != q.element_count() ||
      g.element_count() != q.element_count()) {
    return ffi::Error::InvalidArgument("sysid dynamics: q, qd, qdd, g differ in size");
  }
  ParallelFor(tree, batch, num_threads,
              [&](Worker& worker, pinocchio::Data& data, int64_t begin, int64_t end) {
    const pinocchio::Model& model = worker.model;
    Eigen::VectorXd lambda(nb);
    Eigen::LLT<Eigen::MatrixXd> llt(nb);
    std::vector<pinocchio::Motion> w(model.njoints);
    for (int64_t b = begin; b < end; ++b) {
      worker.Set(placement.typed_data() + 12 * nb * b, inertial.typed_data() + 10 * nb * b,
                 armature.typed_data() + nb * b);
      const Vec q_b(q.typed_data() + nb * b, nb), qd_b(qd.typed_data() + nb * b, nb);
      const Vec qdd_b(qdd_in.typed_data() + nb * b, nb), g_b(g.typed_data() + nb * b, nb);
      // dtau_dq, dtau_dv and M (upper triangle, armature included).
      pinocchio::computeRNEADerivatives(model, data, q_b, qd_b, qdd_b);
      data.M.triangularView<Eigen::StrictlyLower>() = data.M.transpose();
      llt.compute(data.M);
      lambda = llt.solve(g_b);
      OutVec(q_bar->typed_data() + nb * b, nb).noalias() = -(data.dtau_dq.transpose() * lambda);
      OutVec(qd_bar->typed_data() + nb * b, nb).noalias() = -(data.dtau_dv.transpose() * lambda);
      OutVec(tau_bar->typed_data() + nb * b, nb) = lambda;
      OutVec(armature_bar->typed_data() + nb * b, nb) = -lambda.cwiseProduct(qdd_b);
      // w_j: body velocities under joint rates lambda; then v_j, a_j of the state.
      pinocchio::forwardKinematics(model, data, q_b, lambda);
      for (int j = 1; j < model.njoints; ++j) w[j] = data.v[j];
      pinocchio::forwardKinematics(model, data, q_b, qd_b, qdd_b);
      double* out = inertial_bar->typed_data() + 10 * nb * b;
      for (int j = 1; j < model.njoints; ++j) {
        const pinocchio::Motion a_gf = data.a[j] - data.oMi[j].actInv(model.gravity);
        Eigen::Map<Eigen::Matrix<double, 10, 1>>(out + 10 * (j - 1)).noalias() =
            -(pinocchio::bodyRegressor(data.v[j], a_gf).transpose() * w[j].toVector());
      }
    }
  });
  return ffi::Error::Success();
}

}  // namespace

#define SYSID_EXPORT extern "C" __attribute__((visibility("default")))
SYSID_EXPORT XLA_FFI_Error* SysidAba(XLA_FFI_CallFrame* call_frame);
SYSID_EXPORT XLA_FFI_Error* SysidAbaVjp(XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(SysidAba, AbaImpl,
                              ffi::Ffi::Bind()
                                  .Arg<F64>()  // q
                                  .Arg<F64>()  // qd
                                  .Arg<F64>()  // tau
                                  .Arg<F64>()  // inertial
                                  .Arg<F64>()  // placement
                                  .Arg<F64>()  // armature
                                  .Ret<F64>()  // qdd
                                  .Attr<ffi::Span<const int64_t>>("parents")
                                  .Attr<ffi::Span<const int64_t>>("prismatic")
                                  .Attr<ffi::Span<const double>>("axis")
                                  .Attr<ffi::Span<const double>>("gravity")
                                  .Attr<int64_t>("num_threads"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SysidAbaVjp, AbaVjpImpl,
                              ffi::Ffi::Bind()
                                  .Arg<F64>()  // q
                                  .Arg<F64>()  // qd
                                  .Arg<F64>()  // qdd (forward pass)
                                  .Arg<F64>()  // inertial
                                  .Arg<F64>()  // placement
                                  .Arg<F64>()  // armature
                                  .Arg<F64>()  // g, cotangent of qdd
                                  .Ret<F64>()  // q_bar
                                  .Ret<F64>()  // qd_bar
                                  .Ret<F64>()  // tau_bar
                                  .Ret<F64>()  // inertial_bar
                                  .Ret<F64>()  // armature_bar
                                  .Attr<ffi::Span<const int64_t>>("parents")
                                  .Attr<ffi::Span<const int64_t>>("prismatic")
                                  .Attr<ffi::Span<const double>>("axis")
                                  .Attr<ffi::Span<const double>>("gravity")
                                  .Attr<int64_t>("num_threads"));
