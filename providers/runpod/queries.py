"""The GraphQL documents orch sends to RunPod: GPU types with their prices, pods (one, all, deploy, stop,
terminate) and the pod fields read back."""

POD_FIELDS = """
    id name desiredStatus lastStatusChange costPerHr gpuCount imageName machineId
    runtime { ports { ip isIpPublic privatePort publicPort type } }
    machine { podHostId gpuDisplayName }
"""
GPU_TYPES = """
query GpuTypes($lowestPriceInput: GpuLowestPriceInput) {
  gpuTypes {
    id displayName memoryInGb secureCloud communityCloud securePrice communityPrice
    maxGpuCount maxGpuCountSecureCloud maxGpuCountCommunityCloud
    lowestPrice(input: $lowestPriceInput) {
      minimumBidPrice uninterruptablePrice minVcpu minMemory stockStatus countryCode
    }
  }
}"""
GPU_TYPE_IDS = "query GpuTypeIds { gpuTypes { id displayName memoryInGb } }"
MY_PODS = f"query MyPods {{ myself {{ pods {{ {POD_FIELDS} }} }} }}"
GET_POD = f"query Pod($input: PodFilter!) {{ pod(input: $input) {{ {POD_FIELDS} }} }}"
DEPLOY = (f"mutation Deploy($input: PodFindAndDeployOnDemandInput!) "
          f"{{ podFindAndDeployOnDemand(input: $input) {{ {POD_FIELDS} }} }}")
STOP = "mutation StopPod($input: PodStopInput!) { podStop(input: $input) { id desiredStatus } }"
TERMINATE = "mutation TerminatePod($input: PodTerminateInput!) { podTerminate(input: $input) }"
